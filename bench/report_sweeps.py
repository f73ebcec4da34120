"""The sweeps section of docs/benchmarks.md, from bench/results/sweeps.json.

    .venv/bin/python -m bench.report_sweeps   # (re)writes the section in docs/benchmarks.md

`sweeps_rows` gives the summary table's rows and `sweeps_section` the section, as the other
report_* modules do for bench.report; run alone, this module puts the section in the page
in place of its previous version (or before the design notes, the page's last section).
"""

from __future__ import annotations

import json
from typing import Any

from bench.harness import REPO, RESULTS
from bench.text import spread_text

TITLE = "## Sweeps: Strata against Ray Tune"
DOC = REPO / "docs" / "benchmarks.md"
LAST_SECTION = "## Design notes behind the figures"


def _s(values: dict[str, float], digits: int = 1) -> str:
    return spread_text(values, digits=digits, unit=" s")


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def best_within_noise(result: dict[str, Any]) -> bool:
    """The two sides' best val_loss ranges over the repetitions overlap, or their medians
    differ by no more than either side's own spread from one repetition to the next."""
    strata, ray = result["summary"]["strata"]["best_value"], result["summary"]["ray"]["best_value"]
    if strata is None or ray is None:
        return False
    widest = max(strata["max"] - strata["min"], ray["max"] - ray["min"])
    return _overlap(strata, ray) or abs(strata["median"] - ray["median"]) <= widest


def _best(values: dict[str, float] | None) -> str:
    return "none" if values is None else spread_text(values, digits=4)


def sweeps_rows(result: dict[str, Any]) -> list[list[str]]:
    summary = result["summary"]
    settings = result["settings"]
    ratio = summary["ratio"]
    runs = len(result["repetitions"])
    return [
        [
            f"Sweep wall time, Strata ÷ Ray Tune (digits, {settings['trials']} trials, "
            f"{settings['parallel']} at a time, ASHA; {runs} repetitions)",
            f"{spread_text(ratio, digits=3)} ({_s(summary['strata']['wall_s'])} ÷ "
            f"{_s(summary['ray']['wall_s'])})",
            f"≤ {result['target']}",
            "yes" if ratio["median"] <= result["target"] else "**no**",
        ],
        [
            "Sweep best val_loss, Strata vs Ray Tune",
            f"{_best(summary['strata']['best_value'])} vs {_best(summary['ray']['best_value'])}",
            "within noise",
            "yes" if best_within_noise(result) else "**no**",
        ],
    ]


def _split_rows(result: dict[str, Any]) -> list[str]:
    lines = []
    for side, name in (("strata", "Strata"), ("ray", f"Ray Tune {result['ray']}")):
        s = result["summary"][side]
        lines.append(
            f"| {name} | {_s(s['wall_s'])} | {_s(s['startup_s_sum'])} "
            f"({_s(s['startup_s_mean'], 2)} each) | {_s(s['training_s_sum'])} "
            f"| {_s(s['decision_s_sum'], 2)} ({_s(s['decision_s_mean'], 2)} each) "
            f"| {_s(s['end_s_sum'], 2)} | {_s(s['idle_slot_s'])} "
            f"| {spread_text(s['epochs_trained'])} | {spread_text(s['pruned'])} |"
        )
    return lines


def _startup_lines(result: dict[str, Any]) -> list[str]:
    """Start-up per trial in two, and Strata's warm starts against its cold ones."""
    strata, ray = result["summary"]["strata"], result["summary"]["ray"]
    lines = [
        "Start-up per trial, in two (means per repetition, median [min-max]): created → the "
        "trial's process started (Strata: the agent's start as the server recorded it; Ray: "
        "the trainable entered in its new worker) and then → its first step (Strata: the "
        "script's imports, data, model and first step's tracing, TensorFlow already imported "
        "in a warm process; Ray: importing TensorFlow and the same):",
        "",
        "| Side | Created → process | Process → first step | Warm starts | Cold starts |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, s in (("Strata", strata), ("Ray Tune", ray)):
        cells = [
            _s(s[key], 2) if key in s else "—"
            for key in (
                "startup_s_to_process_mean",
                "startup_s_in_process_mean",
                "startup_s_warm_mean",
                "startup_s_cold_mean",
            )
        ]
        if name == "Ray Tune":
            cells[3] = f"all: {_s(s['startup_s_mean'], 2)}"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _repetition_rows(result: dict[str, Any]) -> list[str]:
    lines = []
    for index, rep in enumerate(result["repetitions"], 1):
        strata, ray = rep["strata"]["summary"], rep["ray"]["summary"]
        warm = f"{strata.get('warm_trials', 0)} of {strata['trials']}"

        def best(summary: dict[str, Any]) -> str:
            value = summary["best_value"]
            return "none" if value is None else f"{value:.4f}"

        lines.append(
            f"| {index} | {rep['seed']} | {rep['order'].replace('-', ' → ')} "
            f"| {strata['wall_s']:.1f} s | {ray['wall_s']:.1f} s | {rep['ratio']:.3f} "
            f"| {best(strata)} | {best(ray)} | {strata['pruned']} / {ray['pruned']} | {warm} "
            f"| {' / '.join(f'{x:.1f}' for x in strata['load_average_before'])} "
            f"| {' / '.join(f'{x:.1f}' for x in ray['load_average_before'])} |"
        )
    return lines


def where_the_time_goes(result: dict[str, Any]) -> list[str]:
    """What makes up each side's wall, from the medians of the split."""
    settings = result["settings"]
    strata, ray = result["summary"]["strata"], result["summary"]["ray"]
    ratio = result["summary"]["ratio"]["median"]
    lines = [
        "Where the time goes (medians, trial-seconds, each of the "
        f"{settings['parallel']} slots counted):",
        "",
    ]
    for name, s in (("Strata", strata), ("Ray Tune", ray)):
        slots = settings["parallel"] * s["wall_s"]["median"]
        parts = {
            "start-up": s["startup_s_sum"]["median"],
            "training": s["training_s_sum"]["median"],
            "pruning decisions": s["decision_s_sum"]["median"],
            "ending full trials": s["end_s_sum"]["median"],
            "idle slots": s["idle_slot_s"]["median"],
        }
        shares = ", ".join(f"{k} {v:.0f} s ({v / slots:.0%})" for k, v in parts.items())
        lines.append(f"- **{name}**: {slots:.0f} slot-seconds: {shares}.")
    lines.append("")
    if ratio > result["target"]:
        saved = ray["startup_s_sum"]["median"] - strata["startup_s_sum"]["median"]
        lines += [
            f"The target (≤ {result['target']}) is missed: {ratio:.2f}. Warm starts take "
            f"{saved:.0f} trial-seconds of start-up off Strata's side, but both sides train "
            "the same steps on the same two cores, and training is most of either side's "
            "slot time; Strata's wall can fall below Ray Tune's by at most the start-up, "
            "decision and idle-slot time Ray spends beyond Strata's, divided over the "
            "slots. Halving the wall would need Ray Tune to spend as long starting trials "
            "as training them.",
            "",
        ]
    return lines


def sweeps_notes(result: dict[str, Any]) -> list[str]:
    """What the figures show besides the ratio, from the raw trials."""
    settings = result["settings"]
    reps = result["repetitions"]
    strata = result["summary"]["strata"]
    lines = []
    warm, cold = strata.get("startup_s_warm_mean"), strata.get("startup_s_cold_mean")
    if warm and cold:
        lines.append(
            f"- **Warm starts**: Strata started {spread_text(strata['warm_trials'])} of "
            f"{settings['trials']} trials warm. Each agent's warm processes go to the first "
            "trials placed on it; a refill imports TensorFlow at idle priority (SCHED_IDLE), "
            "which on two cores kept busy by three trials (and other work) seldom finishes "
            "before the next trial is placed, so the later trials start cold: "
            f"{_s(cold, 2)} from created to first step against {_s(warm, 2)} warm (means "
            "per repetition). Ray Tune starts every trial in a new worker process that "
            "imports TensorFlow."
        )
    late = [
        (index, t)
        for index, rep in enumerate(reps, 1)
        for t in rep["strata"]["trials"]
        if t["status"] == "pruned" and t["epochs"] >= settings["epochs"]
    ]
    if late:
        examples = ", ".join(
            f"rep {index} trial {t['number']} (val_loss {t['curve'][-1][1]:.3f})"
            for index, t in late
        )
        lines.append(
            f"- **Pruned at the last epoch**: {len(late)} Strata trials in "
            f"{len({index for index, _ in late})} of {len(reps)} repetitions were pruned "
            f"when they reported epoch {settings['epochs']}, their last ({examples}; the "
            "reason says `ASHA rung 2`). Optuna's SuccessiveHalvingPruner has a rung at "
            "min_resource times reduction_factor squared = "
            f"{settings['epochs']}, the epochs the job runs, so a trial that trained in full "
            "can be pruned at its end, and its value is then left out of the best. Ray's "
            "ASHAScheduler puts no rung at max_t (its rungs here are epochs 1 and 3): such a "
            "trial completes there and counts."
        )
    ray = result["summary"]["ray"]
    lines += [
        "- **Pruning decisions**: Strata's sweep runner looks at running trials every "
        "`sweep_poll_seconds` (0.5 s) and reads the objective from the stored metric "
        "points, which the task's runtime sends in batches: "
        f"{_s(strata['decision_s_mean'], 2)} per pruned trial from the epoch's report to the "
        f"job's cancelled event. Ray Tune's scheduler decides on the result as the driver "
        f"receives it: {_s(ray['decision_s_mean'], 2)}.",
        "- **Ending full trials**: on Strata a trial that ran every epoch holds its slot "
        "until its job has ended (the script's last checkpoint, the process's exit, the "
        "agent's report, the server's transition; the runner's next look, which starts its "
        "successor, counts in the idle slots): "
        f"{_s(strata['end_s_sum'], 1)} per repetition. A Ray Tune trial completes as its "
        "last result arrives and its actor is torn down after.",
        "",
    ]
    return lines


def sweeps_section(result: dict[str, Any]) -> list[str]:
    settings = result["settings"]
    machine = result["machine"]
    summary = result["summary"]
    load = " / ".join(f"{x:.1f}" for x in machine["load_average_at_start"])
    lines = [
        TITLE,
        "",
        "`bench/sweeps.py` (Ray side: `bench/ray_tune_peer.py`): the search of",
        f"`{result['spec']}` run by both, one after the other in each repetition (the order",
        "alternating), with the same TPE seed: "
        f"{settings['trials']} trials of the digits job (one chief under MirroredStrategy, "
        f"{settings['epochs']} epochs of {settings['steps_per_epoch']} steps of "
        f"{settings['batch']}, val_loss on {settings['validation_steps']} held-out batches at "
        f"each epoch end), {settings['parallel']} at a time, learning rate "
        f"[{settings['lr_low']:g}, {settings['lr_high']:g}] (log) and hidden units "
        f"[{settings['units_low']}, {settings['units_high']}] (int, log), ASHA pruning with "
        f"a minimum of {settings['min_resource']} epoch and reduction factor "
        f"{settings['reduction_factor']}.",
        "",
        f"- **Strata** (commit {result['measured_on']['commit']}): a local cluster (the server, "
        f"{result['agents']} local agents, {result['warm_pool_per_agent']} warm processes "
        "each, the pools full and the machine quiet before the POST); Optuna's TPE sampler "
        "and SuccessiveHalvingPruner in the server's sweep runner. Wall: POST /sweeps → the "
        "sweep's finished_at.",
        f"- **Ray Tune {result['ray']}**: a private Ray per repetition "
        f"(`ray.init(num_cpus={settings['parallel']})`, up before the clock starts), a "
        "function trainable running the same model, data and fit with a tf_keras callback "
        "that calls `tune.report` each epoch, `OptunaSearch(sampler=TPESampler(seed))`, "
        f"`ASHAScheduler(max_t={settings['epochs']}, grace_period={settings['min_resource']}, "
        f"reduction_factor={settings['reduction_factor']})`, `max_concurrent_trials="
        f"{settings['parallel']}`, one CPU per trial, actors not reused (Tune's default), "
        "workers at niceness 0 (as Strata's tasks; Ray's default is 15). Wall: "
        "`Tuner.fit()` → returned.",
        "",
        "Per repetition (load average 1 / 5 / 15 min before each side):",
        "",
        "| Rep | Seed | Order | Strata wall | Ray Tune wall | Strata ÷ Ray | Strata best "
        "val_loss | Ray best val_loss | Pruned (Strata / Ray) | Strata trials started warm "
        "| Load before Strata | Load before Ray |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *_repetition_rows(result),
        "",
        f"Strata ÷ Ray Tune wall: **{spread_text(summary['ratio'], digits=3)}** (median "
        f"[min-max], target ≤ {result['target']}). Best val_loss (of the trials that ran every "
        f"epoch): Strata {_best(summary['strata']['best_value'])}, Ray Tune "
        f"{_best(summary['ray']['best_value'])}: "
        + (
            "within the noise from one repetition to the next."
            if best_within_noise(result)
            else "**not** within the noise from one repetition to the next."
        ),
        "",
        "The time split, summed over a repetition's trials (median [min-max]): start-up is "
        "trial created (Strata: its job's created_at; Ray: the trial added) → its first "
        "training step ends; training is first step → the report of the last epoch it ran; "
        "a pruning decision is the report of the epoch a trial was pruned at → the decision "
        "recorded (Strata: the job's cancelled event; Ray: on_trial_complete on the driver); "
        "ending is a full trial's last report → it ended; idle slots are the slots times the wall "
        "less every trial's created → ended.",
        "",
        "| Side | Wall | Start-up, sum (per trial) | Training, sum | Pruning decisions, sum "
        "(per pruned trial) | Ending full trials, sum | Idle slots | Epochs trained "
        "| Pruned |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *_split_rows(result),
        "",
        *_startup_lines(result),
        *where_the_time_goes(result),
        *sweeps_notes(result),
        f"Machine: {machine['nproc']} cores ({machine['cpu_model']}), Python "
        f"{machine['python']}, run {machine['date']}, load average {load} at its start and "
        + " / ".join(f"{x:.1f}" for x in result["load_average_at_end"])
        + " at its end; shared with other work throughout, so single repetitions move by "
        "tens of percent.",
        "",
    ]
    return lines


def splice(page: str, section: list[str]) -> str:
    """The page with the section in place of its previous version, else before the last."""
    text = "\n".join(section).rstrip() + "\n\n"
    if TITLE in page:
        head, rest = page.split(TITLE, 1)
        after = rest.find("\n## ")
        tail = rest[after + 1 :] if after >= 0 else ""
        return head + text + tail
    if LAST_SECTION in page:
        head, tail = page.split(LAST_SECTION, 1)
        return head + text + LAST_SECTION + tail
    return page.rstrip() + "\n\n" + text


def main() -> int:
    result = json.loads((RESULTS / "sweeps.json").read_text())
    DOC.write_text(splice(DOC.read_text(), sweeps_section(result)))
    print(DOC)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
