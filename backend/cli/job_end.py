"""How a followed job ended, said last: the failing task's last log lines, then the job's
status and reason. The stream tells when the job ends; the job itself (REST) tells why."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from backend.jobs.schemas import JobRead
from backend.jobs.states import JobStatus, TaskStatus
from backend.rest_client import ClientError, ServerUnreachable, StrataClient

# Exit codes of `strata submit --follow` and `strata jobs logs -f`.
EXIT_SUCCEEDED = 0
EXIT_NOT_SUCCEEDED = 1  # failed or cancelled (and any error, as for every command)
EXIT_INTERRUPTED = 130  # Ctrl-C: the job goes on
TAIL_LINES = 10


def exit_code(status: str) -> int:
    return EXIT_SUCCEEDED if status == JobStatus.succeeded else EXIT_NOT_SUCCEEDED


def failing_task(job: JobRead) -> str | None:
    """The task the reason is about ("chief:0 exited with code 3"), else the first failed one."""
    if job.reason:
        named = job.reason.split(" ", 1)[0]
        if any(task.name == named for task in job.tasks):
            return named
    failed = (
        task.name for task in job.tasks if task.status in (TaskStatus.failed, TaskStatus.lost)
    )
    return next(failed, None)


def status_line(job_id: int, status: str, reason: str | None) -> str:
    return f"job {job_id} {status}" + (f": {reason}" if reason else "")


def say_how_it_ended(client: StrataClient, job_id: int, status: str, console: Console) -> int:
    """Print how the job ended (`status` as the stream last said it) and return the exit code."""
    try:
        job = client.job(job_id)
    except (ClientError, ServerUnreachable) as exc:
        # The stream's word on the outcome stands; only the reason is missing.
        console.print(escape(f"{status_line(job_id, status, None)} (no reason: {exc})"))
        return exit_code(status)
    task = failing_task(job) if job.status is JobStatus.failed else None
    if task is not None:
        try:
            lines = client.task_logs(job_id, task, tail=TAIL_LINES).lines
        except (ClientError, ServerUnreachable):
            lines = []  # a task that never started has no log; the reason says why
        if lines:
            console.print(f"last lines of {task}:", style="bold", highlight=False)
        for line in lines:
            console.print(f"{task:>10} {escape(line)}", highlight=False, soft_wrap=True)
    console.print(
        escape(status_line(job.id, job.status.value, job.reason)),
        style="bold",
        highlight=False,
        soft_wrap=True,
    )
    return exit_code(job.status.value)
