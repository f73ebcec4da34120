"""`strata sweep`: start a hyperparameter sweep, list sweeps, show one with its trials, stop one.

The trials table's columns and cells come from `trials_table`, a pure function of the sweep as
`GET /sweeps/{id}` answers it, with the dashboard's trials table's rows, columns and values
(`frontend/src/pages/SweepPage.tsx`): numbers written as its `metric` and `paramText` write them
(frontend/src/ui/format.ts, frontend/src/data/sweeps.ts), in JavaScript's roundings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from backend.cli.client import (
    ServerOption,
    TokenOption,
    connect,
    console,
    upload_code,
)
from backend.cli.code_submit import code_dir, read_spec, with_bundle
from backend.cli.progress_view import NONE, readable_duration
from backend.sweeps.schemas import SweepRead, SweepSummary, TrialRead
from backend.sweeps.states import SweepStatus

ARROWS = {"minimize": "↓", "maximize": "↑"}
# Where JavaScript's String(number) turns to an exponent.
_JS_FIXED_LIMIT = 1e21


# --- the pure part: what the tables say ------------------------------------------------------


def _exponential(value: float, digits: int) -> str:
    """JavaScript's value.toExponential(digits): '1.23e-4', '2.50e+6' (halves away from 0)."""
    exact = Decimal(value)
    places = Decimal(1).scaleb(-digits)
    exponent = exact.adjusted()
    mantissa = exact.scaleb(-exponent).quantize(places, ROUND_HALF_UP)
    if abs(mantissa) >= 10:  # 9.995e-4 rounds up to 1.00e-3
        exponent += 1
        mantissa = exact.scaleb(-exponent).quantize(places, ROUND_HALF_UP)
    return f"{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"


def _significant(value: float, digits: int) -> Decimal:
    """The value rounded to `digits` significant digits as toPrecision rounds (halves away
    from zero, on the float's exact value)."""
    exact = Decimal(value)
    return exact.quantize(Decimal(1).scaleb(exact.adjusted() - digits + 1), ROUND_HALF_UP)


def _js_string(value: float) -> str:
    """JavaScript's String(value) for 1e-7 <= |value| < 1e21: the shortest decimal that reads
    back as the same float, without a trailing '.0'."""
    return repr(value).removesuffix(".0")


def number_text(value: float | None) -> str:
    """A metric as the dashboard writes it (`metric` in frontend/src/ui/format.ts): 4
    significant digits without trailing zeros (0.1235, 12.5, 3), one decimal from 100 on
    (123.5, 150), and 3 digits with an exponent below 0.001 or from a million on (1.23e-4,
    2.50e+6)."""
    if value is None or math.isnan(value):
        return NONE
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"  # -0.0 too, as JavaScript's String(-0) writes it
    size = abs(value)
    if size < 1e-3 or size >= 1e6:
        return _exponential(value, 2)
    if size >= 100:
        text = f"{Decimal(value).quantize(Decimal('0.1'), ROUND_HALF_UP):f}"
    else:
        text = f"{_significant(value, 4):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def param_text(value: Any) -> str:
    """A parameter's value as the dashboard writes it (`paramText` in
    frontend/src/data/sweeps.ts): whole numbers as they are (64, 3), others with 4
    significant digits (0.01235, 1235, 12350) or, below 0.001 or from a million on, 4 digits
    with an exponent (1.235e-4); true/false; strings as they are."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        if value.is_integer() and abs(value) < _JS_FIXED_LIMIT:
            return str(int(value))
        size = abs(value)
        if size < 1e-3 or size >= 1e6:
            return _exponential(value, 3)
        return _js_string(float(_significant(value, 4)))
    return str(value)


def reached(trial: TrialRead) -> tuple[float | None, bool]:
    """The objective the trial got to: its value, else (running, pruned, failed, stopped) its
    last intermediate value; and whether it is that intermediate one."""
    if trial.value is not None:
        return trial.value, False
    if trial.curve:
        return trial.curve[-1][1], True
    return None, False


def resource_reached(trial: TrialRead) -> str:
    """The epoch (or step) of the last intermediate value reported for the trial."""
    if not trial.curve:
        return NONE
    resource = float(trial.curve[-1][0])
    return str(int(resource)) if resource.is_integer() else _js_string(resource)


def objective_text(sweep: SweepSummary) -> str:
    """'val_loss ↓' (minimized) or 'accuracy ↑' (maximized)."""
    return f"{sweep.objective} {ARROWS[sweep.direction]}"


def ended(sweep: SweepSummary) -> int:
    counts = sweep.counts
    return counts.succeeded + counts.pruned + counts.failed + counts.stopped


@dataclass(frozen=True)
class TrialsTable:
    columns: list[str]
    rows: list[list[str]]
    # Per row: whether its value is the last intermediate one of a trial that has no result.
    intermediate: list[bool]

    VALUE_COLUMN = -4  # the objective's column, counted from the end


def parameter_names(sweep: SweepRead) -> list[str]:
    """The spec's parameters in its order, then any other a trial has."""
    names = list(sweep.spec.parameters)
    for trial in sweep.trials:
        names += [name for name in trial.params if name not in names]
    return names


def trials_table(sweep: SweepRead) -> TrialsTable:
    """One row per trial, by number: number, status, each parameter, the objective (its final
    value, else its last intermediate one), the epoch (or step) it reached, its job and why it
    ended so."""
    names = parameter_names(sweep)
    unit = "EPOCH" if sweep.resource == "epochs" else "STEP"
    columns = ["TRIAL", "STATUS", *names, sweep.objective, unit, "JOB", "REASON"]
    rows, intermediate = [], []
    for trial in sorted(sweep.trials, key=lambda t: t.number):
        value, partial = reached(trial)
        rows.append(
            [
                str(trial.number),
                trial.status.value,
                *(param_text(trial.params.get(name)) for name in names),
                number_text(value),
                resource_reached(trial),
                str(trial.job_id),
                trial.reason or "",
            ]
        )
        intermediate.append(partial)
    return TrialsTable(columns, rows, intermediate)


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={param_text(value)}" for name, value in params.items())


def best_text(sweep: SweepSummary) -> str:
    best = sweep.best
    if best is None:
        return "none yet" if sweep.status in (SweepStatus.running, SweepStatus.stopping) else "none"
    return (
        f"trial {best.number}, {sweep.objective} {number_text(best.value)} "
        f"({params_text(best.params)}), job {best.job_id}"
    )


def budget_text(sweep: SweepRead) -> str:
    budget = sweep.spec.budget
    parts = [f"{budget.trials} trials", f"{budget.parallel} at a time"]
    if budget.max_failed is None:
        parts.append("failures never stop it")
    else:
        parts.append(f"stops after {budget.max_failed + 1} failed")
    if budget.wall_time is not None:
        parts.append(f"wall time {readable_duration(budget.wall_time)}")
    return ", ".join(parts)


def search_text(sweep: SweepRead) -> str:
    """'tpe sampler (seed 7), early stopping asha by epochs (min 1, reduction factor 3)'."""
    sampler, stopping = sweep.spec.sampler, sweep.spec.early_stopping
    text = f"{sampler.type} sampler" + ("" if sampler.seed is None else f" (seed {sampler.seed})")
    if stopping.type == "none":
        return f"{text}, no early stopping"
    detail = f"min {stopping.min_resource}"
    if stopping.type == "median":
        detail += f", after {stopping.startup_trials} trials"
    else:
        detail += f", reduction factor {stopping.reduction_factor}"
        if stopping.max_resource is not None:
            detail += f", max {stopping.max_resource}"
    return f"{text}, early stopping {stopping.type} by {stopping.resource} ({detail})"


# --- the commands ---------------------------------------------------------------------------


def sweep_create(
    spec: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="Sweep spec (YAML/JSON).")
    ],
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            "-p",
            envvar="STRATA_PROJECT",
            help="Run its trials in this project (instead of job.project, else your default).",
        ),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Start a sweep; with a `code` section in its job, the code dir goes with it (once, for
    every trial)."""
    document = read_spec(spec)  # None when it is not YAML: the server says what is wrong
    job = document.get("job") if isinstance(document, dict) else None
    directory = None if not isinstance(job, dict) else code_dir(spec, job, None)
    if isinstance(job, dict) and project is not None:
        job = {**job, "project": project}
    with connect(server, token) as client:
        if not isinstance(document, dict) or not isinstance(job, dict):
            sweep = client.create_sweep(spec)
        elif directory is None:
            sweep = client.create_sweep_document({**document, "job": job})
        else:
            sha256 = upload_code(client, directory)
            sweep = client.create_sweep_document({**document, "job": with_bundle(job, sha256)})
    console.print(
        f"sweep [bold]{sweep.id}[/bold] ({escape(sweep.name)}) created in project "
        f"{escape(sweep.project)}: {sweep.status.value}, {sweep.budget} trials, "
        f"{sweep.parallel} at a time",
        highlight=False,
    )
    console.print(
        f"follow it: strata sweep show {sweep.id} (or the dashboard's Sweeps page)",
        highlight=False,
    )


def sweep_ls(
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="Only this project's sweeps.")
    ] = None,
    status: Annotated[
        list[SweepStatus] | None, typer.Option("--status", "-s", help="Only in this status.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """List the sweeps of your projects (or of one), newest first."""
    with connect(server, token) as client:
        found = client.sweeps(project=project, statuses=[s.value for s in status or []])
    table = Table(
        "ID",
        "NAME",
        "STATUS",
        "PROJECT",
        "OBJECTIVE",
        "TRIALS",
        "RUNNING",
        "PRUNED",
        "FAILED",
        "BEST",
    )
    for sweep in found:
        table.add_row(
            str(sweep.id),
            escape(sweep.name),
            sweep.status.value,
            escape(sweep.project),
            objective_text(sweep),
            f"{ended(sweep)}/{sweep.budget}",
            str(sweep.counts.running),
            str(sweep.counts.pruned),
            str(sweep.counts.failed),
            NONE if sweep.best is None else number_text(sweep.best.value),
        )
    console.print(table)


def sweep_show(
    sweep_id: Annotated[int, typer.Argument(min=1)],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Show a sweep: its status, objective, budget, best trial so far and every trial."""
    with connect(server, token) as client:
        sweep = client.sweep(sweep_id)
    console.print(f"[bold]sweep {sweep.id}[/bold] {escape(sweep.name)}")
    reason = f" — {sweep.reason}" if sweep.reason else ""
    console.print(escape(f"status: {sweep.status.value}{reason}"), highlight=False)
    submitter = f", submitted by {sweep.submitted_by}" if sweep.submitted_by else ""
    console.print(escape(f"project: {sweep.project}{submitter}"), highlight=False)
    console.print(
        escape(f"objective: {objective_text(sweep)} ({sweep.direction})"), highlight=False
    )
    console.print(escape(f"search: {search_text(sweep)}"), highlight=False)
    counts = sweep.counts
    console.print(
        f"budget: {budget_text(sweep)}; {ended(sweep)} ended ({counts.succeeded} succeeded, "
        f"{counts.pruned} pruned, {counts.failed} failed, {counts.stopped} stopped), "
        f"{counts.running} running",
        highlight=False,
    )
    console.print(escape(f"best: {best_text(sweep)}"), highlight=False)
    view = trials_table(sweep)
    if not view.rows:
        console.print("trials: none started yet")
        return
    table = Table(*(escape(column) for column in view.columns))
    for row, partial in zip(view.rows, view.intermediate, strict=True):
        cells = [Text(cell) for cell in row]
        if partial:
            cells[TrialsTable.VALUE_COLUMN].stylize("dim")
        table.add_row(*cells)
    console.print(table)
    if any(view.intermediate):
        console.print(
            f"{sweep.objective} dimmed: a trial's last intermediate value, as it did not finish",
            highlight=False,
        )


def sweep_stop(
    sweep_id: Annotated[int, typer.Argument(min=1)],
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why, recorded with the stop.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Stop a running sweep: no more trials start, the running ones are cancelled, and it
    ends `stopped` with the best found so far."""
    with connect(server, token) as client:
        sweep = client.stop_sweep(sweep_id, reason)
    console.print(
        escape(f"sweep {sweep.id} is {sweep.status.value}: {sweep.reason or ''}"), highlight=False
    )


def register(app: typer.Typer) -> None:
    sweep = typer.Typer(
        help="Hyperparameter sweeps: trials as jobs, sampled and pruned by Optuna.",
        no_args_is_help=True,
    )
    sweep.command("create")(sweep_create)
    sweep.command("ls")(sweep_ls)
    sweep.command("show")(sweep_show)
    sweep.command("stop")(sweep_stop)
    app.add_typer(sweep, name="sweep")
