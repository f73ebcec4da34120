"""The A/B tables of docs/benchmarks.md: a job started by hand against the same job with one of
the agent's ways of starting a task added at a time, and under Strata (bench/ab.py)."""

from __future__ import annotations

from typing import Any

from bench.harness import spread
from bench.launch import AGENTS, SERVER
from bench.text import spread_text

# What each variant is, for the page.
VARIANTS = {
    "hand": "by hand",
    "hand-again": "by hand again (A/A: what order and noise alone make of a ratio)",
    "hand+env": "+ the agent's environment",
    "hand+grpc-options": "+ TF_GRPC_DEFAULT_OPTIONS",
    "hand+pipes": "+ output through the agent's pipes and line splitting",
    "hand+session": "+ a session per task (as the agent started tasks before)",
    "hand+group": "+ a process group per task in the parent's session (as the agent does now)",
    "hand+cgroup": "+ a cgroup per task",
    "hand+agent-sched": "+ the agent's nice value, policy and CPU affinity",
    "hand+server-entry": "+ `python -m agents.runtime.server` for the workers and the ps",
    "hand+backups": "+ the runtime's backups",
    "hand+runtime-callbacks": "+ the runtime library, streaming to the server",
    "hand+local-reads": "+ steps_per_execution read on the coordinator (the runtime's, alone)",
    "hand+all": "+ all of the above",
    "strata": "Strata, cold starts",
    "strata-warm": "Strata, warm starts (the default)",
    "strata-bare": "Strata without `runtime.callbacks()`",
}
JOBS = {
    "parameter_server": "parameter_server (1 chief, 2 workers, 1 ps)",
    "multi_worker_mirrored": "multi_worker_mirrored (2 workers)",
}
CONTROL_PLANE = (SERVER, AGENTS)
# Targets the page keeps (bench/ab.py measures them in the same runs as the ratios).
STEPS_TARGET = 0.98  # Strata ÷ by hand, steps/s
TASK_CPU_TARGET = 1.02  # each task's CPU per step, Strata ÷ by hand
RUNTIME_TARGET = 0.03  # the runtime library's CPU per step, as a share of the tasks' by hand
CONTROL_TARGET = 0.01  # cores of the server and the agents per running task


def _target_row(measurement: str, result: str, target: str, met: bool) -> list[str]:
    """A summary row: what was measured, the figure, the target, and whether it is met."""
    return [measurement, result, target, "yes" if met else "**no**"]


def ratio_text(values: dict[str, float]) -> str:
    return spread_text(values, digits=3)


def _tasks(cpu: dict[str, dict[str, float]]) -> list[str]:
    return [name for name in cpu if ":" in name]


def _task_cpu(figures: dict[str, Any]) -> float:
    """The tasks' CPU per step together (sum of the medians), milliseconds."""
    cpu = figures["cpu_ms_per_step"]
    return sum(float(cpu[task]["median"]) for task in _tasks(cpu))


def _control_ms(figures: dict[str, Any]) -> float | None:
    cpu = figures["cpu_ms_per_step"]
    if not all(name in cpu for name in CONTROL_PLANE):
        return None
    return sum(float(cpu[name]["median"]) for name in CONTROL_PLANE)


def strata_variants(entry: dict[str, Any]) -> list[str]:
    return [v for v in ("strata-warm", "strata") if v in entry and "steps_ratio" in entry[v]]


def runtime_share(entry: dict[str, Any]) -> float | None:
    """The runtime library's CPU per step (by hand with it, less by hand without), as a share
    of the tasks' CPU per step by hand. Where the run has by hand with the runtime's copy of
    steps_per_execution alone, that is the "without": what the copy saves is not counted
    against the rest of the library's cost."""
    with_it, hand = entry.get("hand+runtime-callbacks"), entry.get("hand")
    if not with_it or "cpu_ms_per_step" not in with_it or not hand:
        return None
    base = entry.get("hand+local-reads")
    without = base if base and "cpu_ms_per_step" in base else hand
    return (_task_cpu(with_it) - _task_cpu(without)) / _task_cpu(hand)


def control_cores_per_task(entry: dict[str, Any], variant: str) -> float | None:
    """The server's and the agents' CPU that a running job adds (under Strata, less beside a
    by-hand run, where they idle), in cores per task of the job."""
    strata, hand = entry.get(variant), entry.get("hand")
    if not strata or not hand:
        return None
    busy, idle = _control_ms(strata), _control_ms(hand)
    if busy is None or idle is None:
        return None
    tasks = len(_tasks(strata["cpu_ms_per_step"]))
    return (busy - idle) * float(strata["steps_per_s"]["median"]) / 1000 / tasks


def ab_rows(ab: dict[str, Any]) -> list[list[str]]:
    """Summary rows: per job, Strata ÷ by hand in steps/s and in each task's CPU per step, the
    runtime library's share and the control plane's cores per task."""
    rows = []
    runs = ab["plan"]["runs"]
    for job, entry in ab["summary"].items():
        for variant in strata_variants(entry):
            steps = entry[variant]["steps_ratio"]
            name = "warm starts" if variant == "strata-warm" else "cold starts"
            rows.append(
                _target_row(
                    f"Training steps/s, Strata ÷ by hand, A/B ({job}, {name}, {runs} rounds)",
                    ratio_text(steps),
                    f"≥ {STEPS_TARGET}",
                    steps["median"] >= STEPS_TARGET,
                )
            )
            cpu = entry[variant]["cpu_ratio"]
            worst = max(cpu, key=lambda task: cpu[task]["median"])
            rows.append(
                _target_row(
                    f"Task CPU per step, Strata ({name}) ÷ by hand, the highest task ({job})",
                    f"{worst} {ratio_text(cpu[worst])}",
                    f"≤ {TASK_CPU_TARGET}",
                    cpu[worst]["median"] <= TASK_CPU_TARGET,
                )
            )
        share = runtime_share(entry)
        if share is not None:
            rows.append(
                _target_row(
                    f"Runtime library's CPU per step, share of the tasks' by hand ({job})",
                    f"{share:+.1%}",
                    f"≤ {RUNTIME_TARGET:.0%}",
                    share <= RUNTIME_TARGET,
                )
            )
        variants = strata_variants(entry)
        cores = control_cores_per_task(entry, variants[0]) if variants else None
        if cores is not None:
            rows.append(
                _target_row(
                    f"Server and agents' CPU per running task ({job})",
                    f"{cores:.4f} cores",
                    f"≤ {CONTROL_TARGET} cores",
                    cores <= CONTROL_TARGET,
                )
            )
    return rows


def _cpu_cell(figures: dict[str, Any]) -> str:
    ratios = figures.get("cpu_ratio", {})
    return ", ".join(
        f"{task} {figures['cpu_ms_per_step'][task]['median']:.2f}"
        + (f" ({ratios[task]['median']:.3f})" if task in ratios else "")
        for task in _tasks(figures["cpu_ms_per_step"])
    )


def _control_cell(figures: dict[str, Any]) -> str:
    cpu = figures["cpu_ms_per_step"]
    found = [f"{cpu[name]['median']:.2f}" for name in CONTROL_PLANE if name in cpu]
    return " + ".join(found) if found else "—"


def ab_table(ab: dict[str, Any]) -> list[str]:
    """One table per job: each variant's steps/s and CPU per step, and both against by hand."""
    lines: list[str] = []
    for job, entry in ab["summary"].items():
        lines += [
            f"**{JOBS.get(job, job)}**, {ab['plan']['runs']} rounds:",
            "",
            "| Variant | Steps/s | ÷ by hand | CPU ms per step by task (÷ by hand) "
            "| Server + agents, ms per step |",
            "| --- | --- | --- | --- | --- |",
        ]
        for variant, figures in entry.items():
            label = VARIANTS.get(variant, variant)
            if "failed" in figures:
                lines.append(f"| {label} | all {figures['failed']} runs failed | | | |")
                continue
            ratio = ratio_text(figures["steps_ratio"]) if "steps_ratio" in figures else "—"
            lines.append(
                f"| {label} | {spread_text(figures['steps_per_s'], digits=1)} | {ratio} "
                f"| {_cpu_cell(figures)} | {_control_cell(figures)} |"
            )
        lines.append("")
    return lines


def ratio_between(ab: dict[str, Any], job: str, variant: str, base: str) -> dict[str, float]:
    """Steps/s of `variant` ÷ `base`, round by round (each variant runs once per round)."""
    runs = ab.get("runs", {}).get(job, {})
    pairs = zip(runs.get(variant, []), runs.get(base, []), strict=False)
    ratios = [
        a["steps_per_s"] / b["steps_per_s"]
        for a, b in pairs
        if a and b and a.get("steps_per_s") and b.get("steps_per_s")
    ]
    return spread(ratios) if ratios else {}
