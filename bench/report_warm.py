"""The warm-against-cold steps/s section of docs/benchmarks.md (bench/warm_throughput.py)."""

from __future__ import annotations

from typing import Any

from bench.report_launch import JOBS, NOT_TASKS, cpu_parts, warm_steps_note
from bench.text import spread_text


def _met(warm: dict[str, Any], job: str) -> bool:
    return bool(warm["summary"][job]["ratio"]["median"] >= warm["target"])


def warm_throughput_rows(warm: dict[str, Any]) -> list[list[str]]:
    """Summary rows: per job, the median of the undisturbed pairs' warm ÷ cold ratios."""
    rows = []
    for job, summary in warm["summary"].items():
        rows.append(
            [
                f"Training steps/s, warm ÷ cold start ({job}, {summary['pairs']} pairs of "
                f"{warm['window_steps']:,} steps)",
                spread_text(summary["ratio"], digits=3),
                f"≥ {warm['target']}",
                "yes" if _met(warm, job) else "no",
            ]
        )
    return rows


def warm_throughput_section(warm: dict[str, Any]) -> list[str]:
    plan, conditions, machine = warm["plan"], warm["conditions"], warm["machine"]
    load = machine["load_average_at_start"]
    lines = [
        "## Training steps/s: warm starts against cold",
        "",
        "`bench/warm_throughput.py`: the launch benchmark's Strata job (digits example, runtime "
        "callbacks on), started cold (`warm_start: false`) and warm (2 warm processes per agent), "
        "in pairs that alternate which runs first. Each run trains "
        f"{warm['window_steps']:,} steps between its first and last epoch end "
        f"({plan['epochs']} epochs of {plan['steps_per_epoch']} steps); before each, the pools "
        f"are full again and the machine quiet (≤ {conditions['quiet_cores']} cores of other "
        f"work). A pair in which other processes took more than {conditions['disturbed_cores']} "
        f"cores is disturbed and made up for (at most {plan['extra']} more per job). Ratios are "
        "taken pair by pair; median [min-max] of the undisturbed pairs. A single pair moves by "
        "several percent either way on this machine with no other work seen beside it: the "
        "median of the pairs is the figure, and how many pairs each side won says whether one "
        "side is steadily ahead.",
        "",
        f"Ran {machine['date']} on {machine['nproc']} cores ({machine['cpu_model']}), load "
        f"average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; {warm['seconds']:.0f} s "
        "in all.",
        "",
        "| Job | Pairs (disturbed) | Cold steps/s | Warm steps/s | Warm ÷ cold | Warm faster in | "
        "CPU ms per step, tasks cold → warm |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = []
    for job, summary in warm["summary"].items():
        cold_cpu, warm_cpu = (_tasks_ms(summary[mode]) for mode in ("cold", "warm"))
        lines.append(
            f"| {JOBS.get(job, job)} | {summary['pairs']} ({summary['disturbed_pairs']}) | "
            f"{spread_text(summary['cold']['steps_per_s'], digits=1)} | "
            f"{spread_text(summary['warm']['steps_per_s'], digits=1)} | "
            f"{spread_text(summary['ratio'], digits=3)} | "
            f"{summary['warm_faster_in']} of {summary['pairs']} | "
            f"{cold_cpu:.2f} → {warm_cpu:.2f} |"
        )
        if not _met(warm, job):
            note = warm_steps_note(summary["ratio"]["median"], summary["cold"], summary["warm"])
            notes.append(f"- **{job}**: {note}")
    return [*lines, "", *notes, *([""] if notes else [])]


def _tasks_ms(mode: dict[str, Any]) -> float:
    """The job's tasks' CPU per step (medians, summed): what training itself cost."""
    parts = cpu_parts(mode["cpu_ms_per_step"])
    return sum(ms for name, ms in parts.items() if name not in NOT_TASKS)
