"""The launch section of docs/benchmarks.md: Strata against starting by hand and Ray Train."""

from __future__ import annotations

from typing import Any

from bench.text import spread_text

JOBS = {
    "parameter_server": "parameter_server (1 chief, 2 workers, 1 ps)",
    "multi_worker_mirrored": "multi_worker_mirrored (2 workers)",
}
VARIANTS = {"strata": "Strata", "hand": "by hand", "ray": "Ray Train"}


def _seconds(values: dict[str, float]) -> str:
    return spread_text(values, digits=2, unit=" s")


def _ratio(values: dict[str, float]) -> str:
    return spread_text(values, digits=3)


def launch_rows(launch: dict[str, Any]) -> list[list[str]]:
    """Summary rows: per job, Strata's ratios to the hand-started processes and to Ray."""
    rows = []
    for job, entry in launch["summary"].items():
        hand = entry.get("strata_vs_hand")
        if hand:
            launch_ratio, steps_ratio = hand["launch_ratio"], hand["steps_ratio"]
            rows.append(
                [
                    f"Launch latency, Strata ÷ by hand ({job})",
                    _ratio(launch_ratio),
                    "≤ 1.2",
                    "yes" if launch_ratio["median"] <= 1.2 else "no",
                ]
            )
            rows.append(
                [
                    f"Training steps/s, Strata ÷ by hand ({job})",
                    _ratio(steps_ratio),
                    "≥ 0.98",
                    "yes" if steps_ratio["median"] >= 0.98 else "no",
                ]
            )
        ray = entry.get("strata_vs_ray")
        if ray:
            rows.append(
                [
                    f"Launch latency, Strata ÷ Ray Train ({job})",
                    _ratio(ray["launch_ratio"]),
                    "< 1",
                    "yes" if ray["launch_ratio"]["median"] < 1 else "no",
                ]
            )
            rows.append(
                [
                    f"Training steps/s, Strata ÷ Ray Train ({job})",
                    _ratio(ray["steps_ratio"]),
                    "> 1",
                    "yes" if ray["steps_ratio"]["median"] > 1 else "no",
                ]
            )
    return rows


def launch_section(launch: dict[str, Any]) -> list[str]:
    plan = launch["plan"]
    floor = launch["tensorflow_import_s"]
    ray = f"Ray {launch['ray_version']}" if launch.get("ray_version") else "Ray (not installed)"
    lines = [
        "## Launch latency and throughput: Strata, by hand, Ray Train",
        "",
        "`bench/launch.py`: the digits example (`--epochs "
        f"{plan['epochs']} --steps-per-epoch {plan['steps_per_epoch']} --batch {plan['batch']}`)"
        " started three ways in each run, the order rotating from run to run: `POST /jobs` to",
        "a running `strata up` (2 agents, streaming on, no periodic checkpoints); a shell",
        "script that starts the same processes with hand-written TF_CONFIG and plain tf_keras",
        f"callbacks; and, for multi_worker_mirrored, {ray}'s `TensorflowTrainer` with the same",
        "model, data and batch (its time includes `ray.init()`). Launch latency: request →",
        "the first training step on the lead task (chief:0, or worker:0), from the wall time",
        "the example prints. Steps/s: the lead task, first epoch end → last epoch end.",
        f"{plan['runs']} run(s) per variant; median [min-max]; ratios are taken run by run.",
        f"The floor, TensorFlow's import in a fresh process: {_seconds(floor)}.",
        "",
        "| Job | Variant | Launch latency | Steps/s | Strata ÷ this: launch | "
        "Strata ÷ this: steps/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for job, entry in launch["summary"].items():
        for variant, label in VARIANTS.items():
            if variant not in entry:
                continue
            ratios = entry.get(f"strata_vs_{variant}")
            lines.append(
                f"| {JOBS.get(job, job)} | {label} | {_seconds(entry[variant]['launch_s'])} | "
                f"{spread_text(entry[variant]['steps_per_s'], digits=1)} | "
                f"{_ratio(ratios['launch_ratio']) if ratios else '—'} | "
                f"{_ratio(ratios['steps_ratio']) if ratios else '—'} |"
            )
    return [*lines, ""]
