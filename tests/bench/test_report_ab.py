"""The A/B section's figures from bench/ab.py's results: the summary rows and their targets."""

from __future__ import annotations

from typing import Any

from bench.report_ab import ab_rows, control_cores_per_task, runtime_share
from bench.report_ab_page import ab_section


def one(median: float) -> dict[str, float]:
    return {"median": median, "min": median * 0.9, "max": median * 1.1}


def figures(steps: float, cpu: dict[str, float], **ratios: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "runs": 8,
        "steps_per_s": one(steps),
        "cpu_ms_per_step": {name: one(ms) for name, ms in cpu.items()},
    }
    found.update(ratios)
    return found


JOB = "parameter_server"
HAND = {"chief:0": 3.0, "ps:0": 3.0, "worker:0": 2.0, "worker:1": 2.0}
RESULT: dict[str, Any] = {
    "machine": {"date": "2026-11-28T18:00:00+00:00", "nproc": 2, "load_average_at_start": [0.4]},
    "plan": {"runs": 8},
    "seconds": 600,
    "summary": {
        "parameter_server": {
            "hand": figures(150, {**HAND, "server": 0.05, "agents": 0.03}),
            "hand+runtime-callbacks": figures(
                148, {**HAND, "chief:0": 3.2}, steps_ratio=one(0.99), cpu_ratio={}
            ),
            "strata": figures(
                147,
                {**HAND, "chief:0": 3.1, "server": 0.15, "agents": 0.07},
                steps_ratio=one(0.98),
                cpu_ratio={"chief:0": one(1.033), "ps:0": one(1.0), "worker:0": one(1.01)},
            ),
        }
    },
}


def test_the_runtime_librarys_share_is_its_cpu_per_step_over_the_tasks_by_hand() -> None:
    share = runtime_share(RESULT["summary"]["parameter_server"])
    assert share is not None and abs(share - 0.2 / 10.0) < 1e-9


def test_the_control_planes_cores_are_what_the_job_adds_to_them_per_task() -> None:
    cores = control_cores_per_task(RESULT["summary"]["parameter_server"], "strata")
    # (0.22 - 0.08) ms per step, at 147 steps/s, over 4 tasks.
    assert cores is not None and abs(cores - 0.14 * 147 / 1000 / 4) < 1e-9


def test_the_rows_name_the_highest_task_and_say_which_targets_are_met() -> None:
    rows = {row[0]: row[1:] for row in ab_rows(RESULT)}
    steps = rows[
        "Training steps/s, Strata ÷ by hand, A/B (parameter_server, cold starts, 8 rounds)"
    ]
    assert steps[0].startswith("0.980") and steps[2] == "yes"
    cpu = rows[
        "Task CPU per step, Strata (cold starts) ÷ by hand, the highest task (parameter_server)"
    ]
    assert cpu[0].startswith("chief:0 1.033") and cpu[2] == "**no**"
    share = rows[f"Runtime library's CPU per step, share of the tasks' by hand ({JOB})"]
    assert share == ["+2.0%", "≤ 3%", "yes"]


def test_the_section_shows_every_variant_of_every_run_kept() -> None:
    text = "\n".join(ab_section({"launch_ab": RESULT}))
    assert "| by hand | 150.0 [135.0-165.0] | — |" in text
    assert "| Strata, cold starts | 147.0" in text and "0.15 + 0.07" in text
