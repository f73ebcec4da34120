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


def launch_notes(launch: dict[str, Any]) -> list[str]:
    """Where the launch time goes, and by how much a missed target was missed."""
    floor = launch["tensorflow_import_s"]["median"]
    notes = ["### Where the time goes", ""]
    for job, entry in launch["summary"].items():
        strata, hand = entry.get("strata"), entry.get("hand")
        if not strata or not hand or "spawned_s" not in strata:
            continue
        total, spawned = strata["launch_s"]["median"], strata["spawned_s"]["median"]
        notes.append(
            f"- **{job}**: of Strata's {total:.2f} s from `POST /jobs` to the first step, "
            f"{spawned:.2f} s pass until the last of the job's processes has been started "
            "(the request, placement on the controller's next pass, the agents' spawn and their "
            f"reports); the other {total - spawned:.2f} s are TensorFlow's, as by hand "
            f"({hand['launch_s']['median']:.2f} s): importing it ({floor:.2f} s alone), "
            "starting the servers, forming the cluster and tracing the first step."
        )
        ratios = entry.get("strata_vs_hand", {})
        launch_ratio = ratios.get("launch_ratio", {}).get("median")
        if launch_ratio is not None and launch_ratio > 1.2:
            notes.append(
                f"  Launch misses its target (≤ 1.2) by {100 * (launch_ratio / 1.2 - 1):.0f}%: "
                f"median ratio {launch_ratio:.3f}."
            )
        steps_ratio = ratios.get("steps_ratio", {}).get("median")
        if steps_ratio is not None and steps_ratio < 0.98:
            notes.append(
                f"  Steps/s misses its target (≥ 0.98) by {100 * (0.98 - steps_ratio):.1f} "
                f"points: median ratio {steps_ratio:.3f}."
            )
    notes += throughput_notes(launch)
    ray = {
        job: entry["strata_vs_ray"]
        for job, entry in launch["summary"].items()
        if "strata_vs_ray" in entry
    }
    for job, ratios in ray.items():
        notes.append(
            f"- **Ray Train ({job})**: Strata's launch takes "
            f"{ratios['launch_ratio']['median']:.2f}x Ray's, and its steps/s are "
            f"{ratios['steps_ratio']['median']:.2f}x Ray's. Ray's launch includes `ray.init()`"
            " (its head node: GCS, raylet, workers), the train controller actor and a worker"
            " group that imports TensorFlow before the same MWM setup."
        )
    return [*notes, ""] if len(notes) > 2 else []


def throughput_notes(launch: dict[str, Any]) -> list[str]:
    """What a Strata-run job pays for that a hand-started one does not: the control plane's
    share of the machine's cores, and the runtime library's share of the lead task's time."""
    cores = launch["machine"]["nproc"]
    profiles = launch.get("lead_task_profiles") or {}
    notes = []
    for job, entry in launch["summary"].items():
        strata, hand = entry.get("strata", {}), entry.get("hand", {})
        ratio = entry.get("strata_vs_hand", {}).get("steps_ratio", {}).get("median")
        if "control_plane_cores" not in strata or "machine_cores" not in hand or ratio is None:
            continue
        control = strata["control_plane_cores"]["median"]
        control_pct = 100 * control / cores
        runtime = _runtime_shares(profiles.get(f"{job}-strata") or {})
        runtime_pct = sum(runtime.values())
        parts = ", ".join(f"{stage} {pct:.1f}%" for stage, pct in runtime.items()) or "nothing"
        gap = 100 * (1 - ratio)
        notes.append(
            f"- **{job}, steps/s** (Strata ÷ by hand {ratio:.3f}, a {gap:.1f}% gap): the "
            f"server and the two agents used {control:.2f} cores during the runs, "
            f"{control_pct:.0f}% of the machine's {cores} (the machine was busy "
            f"{strata['machine_cores']['median']:.2f} cores under Strata, "
            f"{hand['machine_cores']['median']:.2f} by hand). In the lead task the runtime "
            f"library took {parts} of the busy samples (py-spy over one more run of each, "
            "imports left out). On cores that training keeps busy, the two add up to about "
            f"{control_pct + runtime_pct:.0f}% of the {gap:.0f}%; the rest is not attributed "
            "by these measurements (only the lead task was sampled, not the other tasks, "
            "which run the runtime library too)."
        )
    return notes


def _runtime_shares(profile: dict[str, Any]) -> dict[str, float]:
    """The lead task's busy samples in the runtime library's parts, by part."""
    return {
        stage: pct
        for stage, pct in profile.get("stages_pct", {}).items()
        if stage.startswith("Strata") and pct > 0
    }
