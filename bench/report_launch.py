"""The launch section of docs/benchmarks.md: Strata against starting by hand and Ray Train."""

from __future__ import annotations

from typing import Any

from bench.cpu_sampler import MACHINE
from bench.launch import AGENTS, REFILLS, REST, SERVER
from bench.text import spread_text

JOBS = {
    "parameter_server": "parameter_server (1 chief, 2 workers, 1 ps)",
    "multi_worker_mirrored": "multi_worker_mirrored (2 workers)",
}
VARIANTS = {
    "strata": "Strata",
    "strata_warm": "Strata, warm starts",
    "strata_bare": "Strata, no runtime callbacks",
    "hand": "by hand",
    "ray": "Ray Train",
}
OTHER = "the rest of the machine"


def _shared_machine(machine: dict[str, Any]) -> list[str]:
    load, cores = machine.get("load_average_at_start", [0.0])[0], machine.get("nproc", 0)
    if not cores or load <= cores:
        return []
    return [
        f"This run shared the machine (load average {load:.1f} on {cores} cores, other work):",
        "absolute times are inflated; ratios within a run are the comparison.",
    ]


def _seconds(values: dict[str, float]) -> str:
    return spread_text(values, digits=2, unit=" s")


def _ratio(values: dict[str, float]) -> str:
    return spread_text(values, digits=3)


def launch_rows(
    launch: dict[str, Any], *, warm_steps: bool = True, hand_steps: bool = True
) -> list[list[str]]:
    """Summary rows: per job, Strata's ratios to the hand-started processes and to Ray.
    `warm_steps=False` leaves out warm ÷ cold steps/s (bench.warm_throughput measures it),
    `hand_steps=False` Strata ÷ by hand in steps/s (bench.ab measures it)."""
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
            if hand_steps:
                rows.append(
                    [
                        f"Training steps/s, Strata ÷ by hand ({job})",
                        _ratio(steps_ratio),
                        "≥ 0.98",
                        "yes" if steps_ratio["median"] >= 0.98 else "no",
                    ]
                )
        warm = entry.get("strata_warm_vs_hand")
        if warm:
            rows.append(
                [
                    f"Launch latency, Strata with warm starts ÷ by hand ({job})",
                    _ratio(warm["launch_ratio"]),
                    "≤ 0.6",
                    "yes" if warm["launch_ratio"]["median"] <= 0.6 else "no",
                ]
            )
        cold = entry.get("strata_vs_strata_warm")
        if cold and warm_steps:
            # strata ÷ warm: invert for warm ÷ cold, the way the target reads.
            steps = 1 / cold["steps_ratio"]["median"]
            rows.append(
                [
                    f"Training steps/s, warm ÷ cold start ({job}, medians)",
                    f"{steps:.3f}",
                    "≥ 0.98",
                    "yes" if steps >= 0.98 else "no",
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
        " started several ways in each run, the order rotating from run to run: `POST /jobs`",
        "to a running `strata up` (2 agents, streaming on, no periodic checkpoints); the same",
        "with the example's `--without-runtime-callbacks` (no `runtime.callbacks()`: what running",
        "under Strata costs without the runtime library in the training process); a shell",
        "script that starts the same processes with hand-written TF_CONFIG and plain tf_keras",
        f"callbacks; and, for multi_worker_mirrored, {ray}'s `TensorflowTrainer` with the same",
        "model, data and batch (its time includes `ray.init()`). Launch latency: request →",
        "the first training step on the lead task (chief:0, or worker:0), from the wall time",
        "the example prints. Steps/s: the lead task, first epoch end → last epoch end.",
        f"{plan['runs']} run(s) per variant; median [min-max]; ratios are taken run by run.",
        f"The floor, TensorFlow's import in a fresh process: {_seconds(floor)}.",
        *_shared_machine(launch.get("machine", {})),
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
    return [*lines, "", *cpu_section(launch)]


def cpu_section(launch: dict[str, Any]) -> list[str]:
    """Where the cores went, per training step: each task, the control plane, the machine."""
    jobs = {
        job: entry
        for job, entry in launch["summary"].items()
        if any("cpu_ms_per_step" in entry.get(v, {}) for v in VARIANTS)
    }
    if not jobs:
        return []
    lines = [
        "CPU per training step over the steps/s window (milliseconds of CPU time, all threads,",
        "sampled every 0.1 s and interpolated; median of the runs): each task, the control",
        "plane (the server and both agents) and the whole machine, whose remainder is other",
        "processes (this benchmark's own among them) and the kernel. Training keeps this",
        "machine's cores busy, so steps/s follow the CPU a step costs.",
        "",
        "| Job | Variant | Steps/s | Tasks | Server | Agents | Rest of the machine | Machine |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for job, entry in jobs.items():
        for variant, label in VARIANTS.items():
            cpu = entry.get(variant, {}).get("cpu_ms_per_step")
            if not cpu:
                continue
            parts = cpu_parts(cpu)
            tasks = ", ".join(
                f"{name} {ms:.2f}" for name, ms in parts.items() if name not in NOT_TASKS
            )
            lines.append(
                f"| {JOBS.get(job, job)} | {label} | "
                f"{entry[variant]['steps_per_s']['median']:.1f} | {tasks} | "
                f"{parts.get(SERVER, 0.0):.2f} | {parts.get(AGENTS, 0.0):.2f} | "
                f"{parts[OTHER]:.2f} | {parts[MACHINE]:.2f} |"
            )
    return [*lines, ""]


NOT_TASKS = (SERVER, AGENTS, MACHINE, OTHER, REFILLS)


def cpu_parts(cpu: dict[str, dict[str, float]]) -> dict[str, float]:
    """Median CPU ms per step by name, with the machine's remainder as OTHER."""
    parts = {name: values["median"] for name, values in cpu.items()}
    rest = parts.pop(REST, None)  # the median of the runs' own remainders, where recorded
    # The refills stay in the rest of the machine; the warm steps/s note says their share.
    named = sum(ms for name, ms in parts.items() if name not in (MACHINE, REFILLS))
    parts[OTHER] = rest if rest is not None else max(0.0, parts.get(MACHINE, named) - named)
    parts.setdefault(MACHINE, named)
    return parts


def warm_steps_note(ratio: float, cold: dict[str, Any], warm: dict[str, Any]) -> str:
    """What a warm run's lower steps/s came with: the refills' priority and the other work."""
    text = f"Steps/s warm ÷ cold: {ratio:.3f} (target ≥ 0.98)."
    refills = warm.get("refills")
    if refills:
        text += (
            f" The pools' refills (TensorFlow imports) beside the warm runs: {refills['idle']}"
            f" sampled under SCHED_IDLE, {refills['normal']} at normal priority."
        )
    if "cpu_ms_per_step" in cold and "cpu_ms_per_step" in warm:
        parts = {
            name: cpu_parts(entry["cpu_ms_per_step"]) for name, entry in (("c", cold), ("w", warm))
        }
        tasks = {
            name: sum(ms for task, ms in part.items() if task not in NOT_TASKS)
            for name, part in parts.items()
        }
        text += (
            f" Per step, the tasks used {tasks['w']:.2f} ms of CPU warm against {tasks['c']:.2f}"
            f" cold, and the rest of the machine {parts['w'][OTHER]:.2f} against"
            f" {parts['c'][OTHER]:.2f} ms"
        )
        if REFILLS in parts["w"]:
            text += f", of which the refills {parts['w'][REFILLS]:.2f} ms"
        if tasks["w"] <= 1.1 * tasks["c"] and parts["w"][OTHER] > 1.1 * parts["c"][OTHER]:
            text += (
                ": the tasks cost about the same CPU per step, so the warm steps waited for"
                " cores that other work held."
            )
        elif tasks["w"] <= 1.1 * tasks["c"]:
            # Nothing beside the warm runs took more: what is left is how runs vary.
            text += ": the same CPU per step and no more work beside them than cold."
        else:
            extra = 100 * (tasks["w"] / tasks["c"] - 1)
            text += f": the tasks' own CPU per step was {extra:.0f}% higher warm."
    spreads = ", ".join(
        f"{label} {entry['steps_per_s']['min']:.1f}-{entry['steps_per_s']['max']:.1f}"
        for label, entry in (("cold", cold), ("warm", warm))
    )
    return f"{text} Steps/s ranged {spreads} over the runs."


def launch_notes(
    launch: dict[str, Any], *, warm_steps: bool = True, hand_steps: bool = True
) -> list[str]:
    """Where the launch time goes, and by how much a missed target was missed (steps/s
    against by hand only with `hand_steps`)."""
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
        warm = entry.get("strata_warm")
        if warm and "spawned_s" in warm:
            notes.append(
                f"  With warm starts: {warm['launch_s']['median']:.2f} s, the processes started "
                f"after {warm['spawned_s']['median']:.2f} s, each in a warm process (TensorFlow "
                "imported beforehand): the rest is the script's imports besides TensorFlow "
                "(the example's scikit-learn), building the strategy and the model, forming the "
                "cluster and tracing the first step."
            )
            cold = entry.get("strata_vs_strata_warm", {}).get("steps_ratio", {}).get("median")
            if warm_steps and cold and 1 / cold < 0.98:
                notes.append(f"  {warm_steps_note(1 / cold, strata, warm)}")
        ratios = entry.get("strata_vs_hand", {})
        launch_ratio = ratios.get("launch_ratio", {}).get("median")
        if launch_ratio is not None and launch_ratio > 1.2:
            notes.append(
                f"  Launch misses its target (≤ 1.2) by {100 * (launch_ratio / 1.2 - 1):.0f}%: "
                f"median ratio {launch_ratio:.3f}."
            )
        steps_ratio = ratios.get("steps_ratio", {}).get("median")
        if hand_steps and steps_ratio is not None and steps_ratio < 0.98:
            notes.append(
                f"  Steps/s misses its target (≥ 0.98) by {100 * (0.98 - steps_ratio):.1f} "
                f"points: median ratio {steps_ratio:.3f}."
            )
    if hand_steps:
        notes += throughput_notes(launch)
    else:
        notes.append(
            f"- **Steps/s** in these tables were measured {launch['machine'].get('date', '')[:10]}"
            ", while the agent still gave each task a session of its own; Strata against by "
            "hand as tasks are started now is in the A/B section below."
        )
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
    """Where a Strata-run job's steps/s go that a hand-started one keeps: the split by the
    variant without the runtime's callbacks, the extra CPU per step by process, and the
    runtime library's share of the script's own time (py-spy)."""
    notes = []
    for job, entry in launch["summary"].items():
        attribution = throughput_attribution(job, entry)
        if attribution is None:
            continue
        text, _ = attribution
        shares = _runtime_shares(launch, job)
        if shares:
            text += (
                " In the tasks that run the script, py-spy (one more run, imports left out) "
                f"found the runtime library in {shares} of the busy samples."
            )
        notes.append(f"- {text}")
    return notes


def throughput_attribution(job: str, entry: dict[str, Any]) -> tuple[str, str] | None:
    """(the paragraph, what dominates in a few words) for one job's steps/s against the
    hand-started processes; None without the variants it needs."""
    ratios = entry.get("strata_vs_hand", {}).get("steps_ratio")
    bare_ratios = entry.get("strata_bare_vs_hand", {}).get("steps_ratio")
    if ratios is None or bare_ratios is None:
        return None
    ratio, bare = ratios["median"], bare_ratios["median"]
    text = (
        f"**{job}, steps/s** (Strata ÷ by hand {_ratio(ratios)}; without the runtime's "
        f"callbacks {_ratio(bare_ratios)}): by the medians, the runtime library in the training "
        f"process costs {100 * (bare - ratio):.1f} points and the rest of running under Strata "
        f"{100 * (1 - bare):.1f}"
        + (" (negative: faster than by hand)" if bare > 1 else "")
        + ". Single runs vary more than these differences on this shared machine (the"
        " spreads above); the CPU each step costs, by process (medians), is the other view:"
        " where the work Strata adds goes."
    )
    split = _cpu_split(entry)
    if split is None:
        return text, "not split by CPU"
    added, parts = split
    ranked = sorted(parts.items(), key=lambda item: item[1], reverse=True)
    text += (
        f" Per training step the machine spent {added:+.2f} ms of CPU more under Strata than by "
        "hand: " + ", ".join(f"{name} {ms:+.2f} ms" for name, ms in ranked) + "."
    )
    server = entry.get("strata_bare", {}).get("cpu_ms_per_step", {}).get(SERVER)
    if server is not None:
        text += (
            f" The server alone used {server['median']:.2f} ms per step with no metrics streamed"
            " (its reconcile pass every 0.5 s, heartbeats, log lines); streaming adds the rest."
        )
    top, top_ms = ranked[0]
    dominant = f"{top} ({top_ms:+.2f} ms of the {added:+.2f} ms of CPU added per step)"
    return f"{text} What dominates: {dominant}.", dominant


def _cpu_split(entry: dict[str, Any]) -> tuple[float, dict[str, float]] | None:
    """The CPU per step Strata adds to the hand-started job's, by where it goes; with the
    variant without callbacks, the tasks' part splits into the runtime library and the rest."""
    cpu = {v: entry.get(v, {}).get("cpu_ms_per_step") for v in ("strata", "strata_bare", "hand")}
    if not cpu["strata"] or not cpu["hand"]:
        return None
    parts = {v: cpu_parts(c) for v, c in cpu.items() if c}

    def tasks(variant: str) -> float:
        return sum(ms for name, ms in parts[variant].items() if name not in NOT_TASKS)

    ours, theirs = parts["strata"], parts["hand"]
    split = {
        "the server": ours.get(SERVER, 0.0),
        "the agents": ours.get(AGENTS, 0.0),
        OTHER: ours[OTHER] - theirs[OTHER],
    }
    if "strata_bare" in parts:
        split["the runtime library in the tasks"] = tasks("strata") - tasks("strata_bare")
        split["the tasks otherwise"] = tasks("strata_bare") - tasks("hand")
    else:
        split["the tasks"] = tasks("strata") - tasks("hand")
    return ours[MACHINE] - theirs[MACHINE], split


def dominates_lines(launch: dict[str, Any]) -> list[str]:
    """One line per job whose steps/s miss the target, for the page's summary."""
    lines = []
    for job, entry in launch["summary"].items():
        ratio = entry.get("strata_vs_hand", {}).get("steps_ratio", {}).get("median")
        attribution = throughput_attribution(job, entry)
        if ratio is None or ratio >= 0.98 or attribution is None:
            continue
        lines.append(
            f"- **Steps/s, {job}** ({100 * (0.98 - ratio):.1f} points short of 0.98): by the "
            f"CPU each training step costs, {attribution[1]}. See the launch section."
        )
    return lines


def _runtime_shares(launch: dict[str, Any], job: str) -> str:
    """The runtime library's parts in each profiled task of the Strata run, as text."""
    profiles = (launch.get("task_profiles") or {}).get(f"{job}-strata") or {}
    texts = []
    for task, profile in profiles.items():
        parts = [
            f"{stage} {pct:.1f}%"
            for stage, pct in profile.get("stages_pct", {}).items()
            if stage.startswith("Strata") and pct > 0
        ]
        if parts:
            texts.append(f"{task}: {', '.join(parts)}")
    return "; ".join(texts)
