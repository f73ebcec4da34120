"""The sweeps section of docs/benchmarks.md, from bench/results/sweeps.json.

    .venv/bin/python -m bench.report_sweeps   # (re)writes the section in docs/benchmarks.md

`sweeps_rows` gives the summary table's rows and `sweeps_section` the section, as the other
report_* modules do for bench.report; run alone, this module puts the section in the page
in place of its previous version (or before the design notes, the page's last section).
"""

from __future__ import annotations

import json
import statistics
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


def _every(values: dict[str, float]) -> str:
    if values["min"] == values["max"]:
        return "in every repetition"
    return f"(median; {values['min']:.0f}-{values['max']:.0f})"


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
        lines += _missed(result)
    return lines


def _missed(result: dict[str, Any]) -> list[str]:
    """Why the median ratio is over the target, and what all-warm starts would be worth."""
    settings = result["settings"]
    strata, ray = result["summary"]["strata"], result["summary"]["ray"]
    ratio = result["summary"]["ratio"]["median"]
    lines = [
        f"In this run the target (≤ {result['target']}) is missed: {ratio:.2f} median. "
        f"Training is {strata['training_s_sum']['median']:.0f} s per repetition on Strata "
        f"against {ray['training_s_sum']['median']:.0f} s on Ray Tune (Strata's job also "
        "writes a checkpoint every 3 epochs and streams its metrics, beside other trials' "
        "start-ups), but start-up is still most of Strata's slot time:",
        "",
    ]
    warm, cold = strata.get("startup_s_warm_mean"), strata.get("startup_s_cold_mean")
    if warm and cold:
        warm_trials = strata["warm_trials"]["median"]
        cold_trials = settings["trials"] - warm_trials
        saving = (cold["median"] - warm["median"]) * cold_trials
        wall = strata["wall_s"]["median"]
        estimate = (wall - saving / settings["parallel"]) / ray["wall_s"]["median"]
        lines += [
            f"- only {warm_trials:.0f} of {settings['trials']} trials start warm (see Warm "
            f"starts below); the {cold_trials:.0f} cold ones take {cold['median']:.1f} s each "
            f"to their first step against {warm['median']:.1f} s warm, about "
            f"{saving:.0f} trial-seconds more per repetition. Had every trial started warm, "
            f"the wall would be about {saving / settings['parallel']:.0f} s shorter: "
            f"{estimate:.2f} of Ray Tune's (an estimate from the medians, not a "
            "measurement);",
        ]
    lines += [
        f"- a warm start is not free either: {warm['median'] if warm else 0:.1f} s from the "
        "job's creation to its first step, nearly all of it in the process (the script's "
        "imports besides TensorFlow, the data, the model and the first step's tracing, on "
        "two cores shared with two other trials); placement and the agent's start take "
        f"{strata['startup_s_to_process_mean']['median']:.2f} s;",
        f"- slots Strata holds or leaves empty beyond Ray Tune: ending full trials "
        f"{strata['end_s_sum']['median']:.0f} s against {ray['end_s_sum']['median']:.1f} s, "
        f"idle slots {strata['idle_slot_s']['median']:.0f} s against "
        f"{ray['idle_slot_s']['median']:.0f} s, pruning decisions "
        f"{strata['decision_s_sum']['median']:.1f} s against "
        f"{ray['decision_s_sum']['median']:.1f} s (trial-seconds per repetition).",
        "",
    ]
    return lines


def sweeps_notes(result: dict[str, Any]) -> list[str]:
    """What the figures show besides the ratio, from the raw trials."""
    settings = result["settings"]
    reps = result["repetitions"]
    strata = result["summary"]["strata"]
    lines = ["Besides:", ""]
    warm, cold = strata.get("startup_s_warm_mean"), strata.get("startup_s_cold_mean")
    if warm and cold:
        lines.append(
            f"- **Warm starts**: Strata started {strata['warm_trials']['median']:.0f} of "
            f"{settings['trials']} trials warm {_every(strata['warm_trials'])}. Each agent's "
            "warm processes go to the first trials placed on it; a refill imports TensorFlow "
            "at idle priority (SCHED_IDLE), which on two cores kept busy by three trials (and "
            "other work) seldom finishes before the next trial is placed, so the later trials "
            "start cold: "
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
    examples = [
        f"rep {index} trial {t['number']}, val_loss {t['curve'][-1][1]:.3f}" for index, t in late
    ]
    for run in result.get("earlier_runs", []):
        examples += [f"earlier run: {found}" for found in run.get("pruned_at_last_epoch", [])]
    if examples:
        lines.append(
            f"- **Pruned at the last epoch**: {len(late)} Strata trials in this run "
            f"({len(reps)} repetitions) and {len(examples) - len(late)} in the earlier one were "
            f"pruned when they reported epoch {settings['epochs']}, their last "
            f"({'; '.join(examples)}; the "
            "reason says `ASHA rung 2`). Optuna's SuccessiveHalvingPruner has a rung at "
            "min_resource times reduction_factor squared = "
            f"{settings['epochs']}, the epochs the job runs, so a trial that trained in full "
            "can be pruned at its end, and its value is then left out of the best. Ray's "
            "ASHAScheduler puts no rung at max_t (its rungs here are epochs 1 and 3): such a "
            "trial completes there and counts."
        )
    ray = result["summary"]["ray"]
    lines += [
        "- **Pruning decisions**: Strata's sweep runner reads the objective from the stored "
        "metric points, which the task's runtime sends in batches; the ingest wakes it when "
        "it has stored an epoch's end of a running trial (else it looks every "
        "`sweep_poll_seconds`, 0.5 s): "
        f"{_s(strata['decision_s_mean'], 2)} per pruned trial from the epoch's report to the "
        f"job's cancelled event. Ray Tune's scheduler decides on the result as the driver "
        f"receives it: {_s(ray['decision_s_mean'], 2)}.",
        "- **Ending full trials**: on Strata a trial that reached `max_resource` (epoch 9) "
        "succeeds when the runner has read that epoch's value, and its successor starts "
        "while its job finishes (the script's last checkpoint, the process's exit) on its "
        f"own: {_s(strata['end_s_sum'], 1)} per repetition. A Ray Tune trial completes as "
        "its last result arrives and its actor is torn down after." + _exit_lag(result),
        "",
    ]
    return lines


def _exit_lag(result: dict[str, Any]) -> str:
    """From a full Strata trial's last checkpoint event to its chief's exit event."""
    lags = []
    for rep in result["repetitions"]:
        for trial in rep["strata"]["trials"]:
            events = trial.get("events", [])
            saved = [e[0] for e in events if (e[3] or "").startswith("checkpoint ")]
            exited = [e[0] for e in events if e[1] and "exited with code 0" in (e[3] or "")]
            if trial["status"] == "succeeded" and saved and exited:
                lags.append(exited[0] - saved[-1])
    if not lags:
        return ""
    return (
        " What its slot no longer waits for, the process's own end: from the last "
        f"checkpoint's event (epoch "
        f"{result['settings']['epochs']}) to the chief's exit {min(lags):.1f}-{max(lags):.1f} s "
        f"(median {statistics.median(lags):.1f} s over {len(lags)} full trials)."
    )


def _earlier(result: dict[str, Any]) -> list[str]:
    lines = []
    for run in result.get("earlier_runs", []):
        load = " / ".join(f"{x:.1f}" for x in run["load_average_at_start"])
        lines += [
            f"An earlier run the same day ({run['date']}, {run['repetitions']} repetitions, "
            f"load average {load} at its start; {run['note']}) measured "
            f"{spread_text(run['ratio'], digits=3)}: Strata {_s(run['strata_wall_s'])} ÷ "
            f"Ray Tune {_s(run['ray_wall_s'])}, with Ray Tune's start-up at "
            f"{_s(run['ray_startup_s_mean'], 1)} per trial against "
            f"{_s(run['strata_startup_s_mean'], 1)} on Strata. The more the machine is loaded, "
            "the longer every cold start (a TensorFlow import) takes, and the more warm starts "
            "are worth: the ratio moves with the load.",
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
        f"{settings['trials']} trials of the digits job (one chief under MirroredStrategy"
        + (
            f" with {settings['chief_gpus']} simulated GPU on Strata, so TensorFlow runs on "
            "the CPU on both sides, "
            if settings.get("chief_gpus")
            else ", "
        )
        + f"{settings['epochs']} epochs of {settings['steps_per_epoch']} steps of "
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
        "`Tuner.fit()` → returned. Strata's cluster stays up, idle, its pools full, while "
        "Ray Tune's side runs.",
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
        *_earlier(result),
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
