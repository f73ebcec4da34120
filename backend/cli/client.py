"""Client commands: submit jobs, inspect and control them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from backend.cli import bundle_view, job_end
from backend.cli.bundle_view import describe_bundle
from backend.cli.code_submit import CodeTooLarge, code_dir, read_spec, upload, with_bundle
from backend.cli.follow import follow
from backend.cli.progress_view import progress_cell, progress_line
from backend.code.archive import Bundle
from backend.jobs.spec import JobSpec
from backend.jobs.states import JobStatus
from backend.rest_client import ClientError, ServerUnreachable, StrataClient
from backend.sizes import human_size

console = Console()
err_console = Console(stderr=True)

ServerOption = Annotated[
    str | None, typer.Option("--server", envvar="STRATA_SERVER", help="Server URL.")
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="STRATA_TOKEN",
        help="Your token (a user's or an admin token).",
        show_default=False,
    ),
]
ProjectOption = Annotated[
    str | None,
    typer.Option("--project", "-p", envvar="STRATA_PROJECT", help="A project's name."),
]


@contextmanager
def connect(server: str | None, token: str | None) -> Iterator[StrataClient]:
    """A client, with the server's refusals printed plainly and turned into exit code 1."""
    try:
        with StrataClient(server, token) as client:
            yield client
    except ClientError as exc:
        # Server messages quote specs ("[python, train.py]"): never read them as markup.
        if exc.errors:
            err_console.print(f"[red]error ({exc.status_code}):[/red] the request was invalid")
            for issue in exc.errors:
                err_console.print(escape(f"  {issue['field'] or '(body)'}: {issue['message']}"))
        else:
            err_console.print(f"[red]error ({exc.status_code}):[/red] {escape(exc.detail)}")
        raise typer.Exit(1) from None
    except ServerUnreachable as exc:
        err_console.print(f"[red]error:[/red] cannot reach the server: {escape(str(exc))}")
        raise typer.Exit(1) from None


def _age(timestamp: datetime | None) -> str:
    if timestamp is None:
        return "-"
    seconds = int((datetime.now(UTC) - timestamp).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _replicas(spec: JobSpec) -> str:
    counts = spec.replicas
    return ", ".join(
        f"{getattr(counts, role).count} {role}"
        for role in ("chief", "worker", "ps", "evaluator")
        if getattr(counts, role).count
    )


def submit(
    spec: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="Job spec (YAML/JSON).")
    ],
    follow_: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Stream its logs and progress until it ends, then say how it ended; "
            "exit 0 if it succeeded, 1 if not, 130 on Ctrl-C.",
        ),
    ] = False,
    code: Annotated[
        Path | None,
        typer.Option(
            "--code",
            exists=True,
            file_okay=False,
            help="Bundle this dir as the job's code (instead of the spec's code.dir).",
        ),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            "-p",
            envvar="STRATA_PROJECT",
            help="Submit to this project (instead of the spec's, else your default project).",
        ),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Submit a job spec; with a `code` section (or --code) its code dir goes with it."""
    document = read_spec(spec)  # None when it is not YAML: the server says what is wrong
    directory = None if document is None else code_dir(spec, document, code)
    if project is not None and isinstance(document, dict):
        document = {**document, "project": project}
    with connect(server, token) as client:
        if directory is None or not isinstance(document, dict):
            job = (
                client.submit(spec)
                if project is None or not isinstance(document, dict)
                else client.submit_document(document)
            )
        else:
            job = client.submit_document(with_bundle(document, upload_code(client, directory)))
        url = client.server
    where = f" to project {escape(job.spec.project)}" if job.spec.project else ""
    console.print(f"job [bold]{job.id}[/bold] ({job.name}) submitted{where}: {job.status.value}")
    if follow_:
        _follow_to_the_end(url, token, job.id, None)


def _follow_to_the_end(server: str, token: str | None, job_id: int, task: str | None) -> None:
    """Follow until the job ends, say last how it ended, and exit with job_end's codes."""
    try:
        status = follow(
            server=server,
            token=token,
            job_id=job_id,
            console=console,
            side_console=err_console,
            task_filter=task,
        )
    except RuntimeError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(job_end.EXIT_NOT_SUCCEEDED) from None
    except KeyboardInterrupt:
        err_console.print(f"stopped following job {job_id}; it goes on")
        raise typer.Exit(job_end.EXIT_INTERRUPTED) from None
    with StrataClient(server, token) as client:
        code = job_end.say_how_it_ended(client, job_id, status, console)
    raise typer.Exit(code)


def jobs_logs(
    job_id: Annotated[int, typer.Argument(min=1)],
    task: Annotated[
        str | None, typer.Option("--task", "-t", help="Only this task, e.g. chief:0.")
    ] = None,
    follow_: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing new lines until the job ends, then say how it ended; "
            "exit 0 if it succeeded, 1 if not, 130 on Ctrl-C.",
        ),
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Print a job's log lines (every task, or one); -f follows them live."""
    with connect(server, token) as client:
        client.job(job_id)  # a clear 404 before anything else
        url = client.server
    if follow_:
        _follow_to_the_end(url, token, job_id, task)
    try:
        follow(
            server=url,
            token=token,
            job_id=job_id,
            console=console,
            side_console=err_console,
            task_filter=task,
            progress=False,
            until_done=False,
        )
    except RuntimeError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None


def jobs_ls(
    status: Annotated[
        list[str] | None, typer.Option("--status", "-s", help="Filter by status.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    project: ProjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """List jobs of your projects (or of one), newest first."""
    with connect(server, token) as client:
        page = client.jobs(statuses=status or [], limit=limit, project=project)
    table = Table(
        "ID",
        "NAME",
        "PROJECT",
        "STATUS",
        "PROGRESS",
        "STRATEGY",
        "REPLICAS",
        "RESTARTS",
        "FAILURES",
        "AGE",
        "REASON",
    )
    for job in page.items:
        table.add_row(
            str(job.id),
            job.name,
            job.spec.project or "default",
            job.status.value,
            progress_cell(job.progress),
            job.strategy,
            _replicas(job.spec),
            str(job.restart_count),
            str(job.failure_count),  # the restarts that spent the policy's budget
            _age(job.created_at),
            job.reason or "",
        )
    console.print(table)
    if page.total > len(page.items):
        console.print(f"showing {len(page.items)} of {page.total}")


def jobs_show(
    job_id: Annotated[int, typer.Argument(min=1)],
    server: ServerOption = None,
    token: TokenOption = None,
    files: Annotated[
        int, typer.Option("--files", min=0, help="List this many of the code bundle's files.")
    ] = bundle_view.SHOWN,
) -> None:
    """Show a job: status, its code bundle, tasks with their placement, and events."""
    with connect(server, token) as client:
        job = client.job(job_id)
        events = client.events(job_id)
        code = [] if job.spec.code is None else describe_bundle(client, job.spec.code.sha256, files)
    console.print(f"[bold]job {job.id}[/bold] {job.name} ({job.strategy})")
    console.print(f"status: {job.status.value}" + (f" — {job.reason}" if job.reason else ""))
    if job.progress is not None:
        console.print(f"progress: {escape(progress_line(job.progress))}", highlight=False)
    elif job.status is JobStatus.running:
        console.print("progress: none reported yet", highlight=False)
    submitter = f", submitted by {job.submitted_by}" if job.submitted_by else ""
    console.print(f"project: {escape(job.spec.project or 'default')}{escape(submitter)}")
    if job.spec.slurm is not None:
        console.print(f"slurm job: {job.slurm_job_id or 'not submitted yet'}", highlight=False)
    environment = job.spec.environment
    if environment is not None and environment.image is not None:
        console.print(f"environment: image {escape(environment.image)}", highlight=False)
    elif environment is not None and environment.python is not None:
        console.print(f"environment: python {escape(environment.python)}", highlight=False)
    for line in code:
        console.print(escape(line), highlight=False, soft_wrap=True)
    console.print(
        f"restarts: {job.restart_count} ({job.failure_count} after failures, of "
        f"{job.spec.restart.max_restarts} the policy allows)",
        highlight=False,
    )
    tasks = Table("TASK", "STATUS", "HOST", "PORT", "GPUS", "PID", "ATTEMPT", "FAILURES", "EXIT")
    for task in job.tasks:
        tasks.add_row(
            task.name,
            task.status.value,
            task.host or "-",
            str(task.port or "-"),
            ",".join(map(str, task.gpus)) or "-",
            str(task.pid or "-"),
            str(task.attempt),
            str(task.failure_count),
            "-" if task.exit_code is None else str(task.exit_code),
        )
    console.print(tasks)
    timeline = Table("AT", "EVENT", "TASK", "BY", "MESSAGE")
    for event in events:
        change = f"{event.from_status} → {event.to_status}" if event.to_status else ""
        timeline.add_row(
            event.at.strftime("%H:%M:%S"),
            event.kind + (f" {change}" if change else ""),
            event.task or "",
            event.actor or "",  # who asked, through the API; empty: the system
            event.message or "",
        )
    console.print(timeline)


def jobs_cancel(
    job_id: Annotated[int, typer.Argument(min=1)],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel a job; its tasks are stopped."""
    with connect(server, token) as client:
        job = client.cancel(job_id)
    console.print(f"job {job.id} is {job.status.value}")


def jobs_suspend(
    job_id: Annotated[int, typer.Argument(min=1)],
    deadline: Annotated[
        float,
        typer.Option(
            min=0.1,
            max=600,
            help="Seconds to wait for the checkpoint it resumes from; past them it is "
            "suspended anyway, to resume from its last backup.",
        ),
    ] = 60.0,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Suspend a job: a checkpoint, then its tasks stop and its GPUs are free (no quota
    counts it) until `strata jobs resume`."""
    with connect(server, token) as client:
        job = client.suspend(job_id, deadline_seconds=deadline)
    console.print(f"job {job.id} is {job.status.value}: {escape(job.reason or '')}")


def jobs_resume(
    job_id: Annotated[int, typer.Argument(min=1)],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Resume a suspended job: it waits for room, then continues from where it stopped."""
    with connect(server, token) as client:
        job = client.resume(job_id)
    console.print(f"job {job.id} is {job.status.value}")


def jobs_restart(
    job_id: Annotated[int, typer.Argument(min=1)],
    task: Annotated[
        str | None,
        typer.Option(
            "--task", "-t", help="Restart only this task (and what its role takes along)."
        ),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Restart a job (placed again), or one task of it where it runs."""
    with connect(server, token) as client:
        job = client.restart(job_id, task)
    what = f"{task} of job {job_id}" if task else f"job {job_id}"
    console.print(f"restarting {what}: {job.status.value}")


def jobs_checkpoint(
    job_id: Annotated[int, typer.Argument(min=1)],
    wait: Annotated[
        float, typer.Option("--wait", min=1, max=300, help="Seconds to wait for it.")
    ] = 30.0,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Checkpoint a running job now (at its next step boundary) and say when it was written."""
    with connect(server, token) as client:
        answer = client.checkpoint(job_id, wait_seconds=wait)
    checkpoint = answer.checkpoint
    console.print(
        f"checkpoint {checkpoint.name} written by {answer.task} at step "
        f"{checkpoint.step} in {answer.seconds:.2f}s: {checkpoint.path} "
        f"({human_size(checkpoint.size_bytes)})"
    )


def jobs_checkpoints(
    job_id: Annotated[int, typer.Argument(min=1)],
    all_: Annotated[bool, typer.Option("--all", help="Include those retention deleted.")] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """List a job's checkpoints, newest first."""
    with connect(server, token) as client:
        found = client.checkpoints(job_id, include_deleted=all_)
    table = Table("NAME", "STEP", "EPOCH", "SIZE", "TRIGGER", "FORMAT", "WRITTEN", "PATH")
    for row in found:
        name = row.name + (" (deleted)" if row.deleted_at else "")
        table.add_row(
            name,
            str(row.step),
            "-" if row.epoch is None else str(row.epoch),
            human_size(row.size_bytes),
            row.trigger or "-",
            row.format + (f" ({row.keras})" if row.keras else ""),
            _age(row.created_at),
            row.path,
        )
    console.print(table)


def jobs_evaluator(
    job_id: Annotated[int, typer.Argument(min=1)],
    action: Annotated[str, typer.Argument(help="start or stop")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Start or stop a job's sidecar evaluator."""
    if action not in ("start", "stop"):
        raise typer.BadParameter(f"expected start or stop, got {action!r}", param_hint="ACTION")
    with connect(server, token) as client:
        job = client.evaluator(job_id, action)
    task = next((t for t in job.tasks if t.role == "evaluator"), None)
    where = f" on {task.host}" if task and task.host else ""
    console.print(f"evaluator of job {job_id}: {task.status.value if task else 'none'}{where}")


def register(app: typer.Typer) -> None:
    app.command()(submit)
    jobs = typer.Typer(help="Inspect and control jobs.", no_args_is_help=True)
    jobs.command("ls")(jobs_ls)
    jobs.command("show")(jobs_show)
    jobs.command("cancel")(jobs_cancel)
    jobs.command("logs")(jobs_logs)
    jobs.command("restart")(jobs_restart)
    jobs.command("suspend")(jobs_suspend)
    jobs.command("resume")(jobs_resume)
    jobs.command("checkpoint")(jobs_checkpoint)
    jobs.command("checkpoints")(jobs_checkpoints)
    jobs.command("evaluator")(jobs_evaluator)
    app.add_typer(jobs, name="jobs")


def upload_code(client: StrataClient, directory: Path) -> str:
    """Upload the directory as a code bundle unless the server has it, saying which; its
    SHA-256. Exits 1 when it is too big or no directory."""

    def report(bundle: Bundle, uploaded: bool) -> None:
        what = "uploaded" if uploaded else "already on the server"
        console.print(
            f"code bundle {bundle.sha256[:12]} ({bundle.files} files, {bundle.size} bytes): {what}"
        )

    try:
        return upload(client, directory, report)
    except (CodeTooLarge, ValueError) as exc:  # too big; not a directory
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
