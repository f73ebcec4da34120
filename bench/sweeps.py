"""Sweeps: the same hyperparameter search through Strata and through Ray Tune, side by side.

    .venv/bin/python -m bench.sweeps [--repetitions 3] [--seed 7]

The search is examples/digits_sweep.yaml's: 12 trials of the digits job (one chief under
MirroredStrategy, 9 epochs of 10 steps, val_loss on 4 held-out batches at each epoch end),
3 at a time, learning rate (float, log) and hidden units (int, log) drawn by Optuna's TPE
sampler, ASHA (min resource 1 epoch, reduction factor 3) pruning on val_loss.

Each repetition runs both sides, one after the other, the order alternating (Strata first in
even repetitions, Ray first in odd ones), with the same sampler seed (`--seed` plus the
repetition's number):

* Strata: one `strata up`-style local cluster (tests.support.cluster.local_cluster: the
  server, two local agents with two simulated GPUs each) for the whole run, the agents' warm
  pools on (STRATA_AGENT_WARM_POOL=3, each agent's default for two GPUs). Before each
  repetition the benchmark waits until every warm pool is full again and the machine is
  quiet, then POSTs the spec (JSON, the seed set) to /sweeps and polls GET /sweeps/{id}
  until the sweep ends. Wall: from just before the POST to the sweep's finished_at.
* Ray Tune: bench/ray_tune_peer.py in a subprocess (a private Ray per repetition, up and
  the machine quiet before the clock starts). Wall: Tuner.fit() called → returned.

Every trial's time is split the same way on both sides, on one machine's wall clock:

* start-up: trial created (Strata: its job's created_at; Ray: the trial added to the
  controller) → end of its first training step (the task's "first step" log line; inside
  the trainable on Ray);
* training: first step → the report of the last epoch it ran (its metric point's wall time;
  the trainable's report time on Ray);
* pruning decision (pruned trials): the report of the epoch it was pruned at → the decision
  recorded (Strata: the job's cancelled event; Ray: the driver's on_trial_complete);
* end (trials that ran every epoch): the last report → the trial ended (the trial's
  finished_at, when its slot went to the next trial; on_trial_complete).

These add up to each trial's created → ended. Beside them, the idle slots: the parallel
slots times the wall, less every trial's created → ended (the time a slot held no trial:
between one trial ending and the next created, and after the last ones start).

Results go to bench/results/sweeps.json; `python -m bench.report_sweeps` renders the section
of docs/benchmarks.md from it.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import (
    REPO,
    RESULTS,
    Conditions,
    machine_busy_seconds,
    machine_info,
    measured_on,
    spread,
    write_result,
)
from bench.ray_tune_peer import (
    SWEEP_SPEC,
    SweepSettings,
    load_sweep_spec,
    ray_version,
    settings_from_spec,
)
from bench.recovery import idle_warm_processes
from tests.support.cluster import Cluster, local_cluster

TARGET = 0.5  # Strata's wall ÷ Ray Tune's
WARM_POOL = 3  # per agent by default: agents.host.warm_pool.default_size for two GPUs
AGENTS = 2
ENDED = ("succeeded", "stopped", "failed")
SWEEP_TIMEOUT = 1200.0
RAY_TIMEOUT = 1500.0
FIRST_STEP = re.compile(r"first step at wall_time=([0-9.]+)")
SIDES = ("strata", "ray")


def epoch_seconds(stamp: str) -> float:
    """An API timestamp (ISO 8601, UTC when it names no zone) as time.time() seconds."""
    parsed = datetime.datetime.fromisoformat(stamp)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def wait_pools_full(cluster: Cluster, pool: int, timeout: float = 300) -> None:
    """Until every local agent says it has its whole warm pool idle."""
    logs = [cluster.data_dir / "agents" / f"local-{index}.log" for index in range(AGENTS)]
    deadline = time.monotonic() + timeout
    while any(idle_warm_processes(log) < pool for log in logs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the agents' warm pools did not refill within {timeout:.0f} s")
        time.sleep(0.5)


# --- one trial, either side -----------------------------------------------------------------


def split_trial(
    *,
    number: int,
    params: dict[str, Any],
    status: str,
    value: float | None,
    curve: list[list[float]],
    reports: dict[int, float],
    created: float,
    first_step: float | None,
    ended: float,
    t0: float,
) -> dict[str, Any]:
    """One trial's record: its times relative to the sweep's start, and its split."""
    trial: dict[str, Any] = {
        "number": number,
        "params": params,
        "status": status,
        "value": value,
        "curve": curve,
        "epochs": len(curve),
        "created": round(created - t0, 3),
        "ended": round(ended - t0, 3),
        "lifetime_s": round(ended - created, 3),
    }
    if first_step is None or not reports:
        return trial  # it never trained
    last_epoch = max(reports)
    last = reports[last_epoch]
    trial |= {
        "first_step": round(first_step - t0, 3),
        "startup_s": round(first_step - created, 3),
        "training_s": round(last - first_step, 3),
    }
    if status == "pruned":
        trial["pruned_at_epoch"] = last_epoch
        trial["decision_s"] = round(ended - last, 3)
    else:
        trial["end_s"] = round(ended - last, 3)
    return trial


def summarise_side(
    trials: list[dict[str, Any]], *, wall: float, parallel: int, epochs: int
) -> dict[str, Any]:
    """A repetition's figures for one side: wall, best, counts and the split."""
    done = [t for t in trials if t["status"] == "succeeded" and t["value"] is not None]
    best = min(done, key=lambda t: t["value"]) if done else None
    started = [t for t in trials if "startup_s" in t]
    decisions = [t["decision_s"] for t in trials if "decision_s" in t]

    def total(key: str) -> float:
        return round(sum(float(t[key]) for t in trials if key in t), 3)

    lifetimes = sum(t["lifetime_s"] for t in trials)
    summary: dict[str, Any] = {
        "wall_s": round(wall, 3),
        "trials": len(trials),
        "succeeded": len(done),
        "pruned": sum(1 for t in trials if t["status"] == "pruned"),
        # Pruned when reporting its last epoch: it trained in full, but its result is dropped.
        "pruned_at_last_epoch": sum(
            1 for t in trials if t["status"] == "pruned" and t["epochs"] >= epochs
        ),
        "failed": sum(1 for t in trials if t["status"] not in ("succeeded", "pruned")),
        "epochs_trained": sum(t["epochs"] for t in trials),
        "full_runs": sum(1 for t in trials if t["epochs"] >= epochs),
        "best_value": best["value"] if best else None,
        "best_params": best["params"] if best else None,
        "best_any_trial": min(
            (t["curve"][-1][1] for t in trials if t["curve"]), default=None
        ),  # the lowest last val_loss of any trial, pruned ones included
        "startup_s": {
            "sum": total("startup_s"),
            "mean": round(statistics.mean(t["startup_s"] for t in started), 3) if started else None,
        },
        "training_s": {"sum": total("training_s")},
        "decision_s": {
            "sum": round(sum(decisions), 3),
            "mean": round(statistics.mean(decisions), 3) if decisions else None,
            "max": round(max(decisions), 3) if decisions else None,
        },
        "end_s": {"sum": total("end_s")},
        "trial_seconds": round(lifetimes, 3),
        "idle_slot_s": round(parallel * wall - lifetimes, 3),
    }
    # Start-up in two: created → the trial's process started (Strata: the agent's start,
    # as the server recorded it; Ray: the trainable entered), then → its first step.
    launched = [t for t in started if "task_started" in t or "entered" in t]
    if launched:
        process = [t.get("task_started", t.get("entered", 0.0)) for t in launched]
        summary["startup_s"] |= {
            "to_process_mean": round(
                statistics.mean(p - t["created"] for p, t in zip(process, launched, strict=True)),
                3,
            ),
            "in_process_mean": round(
                statistics.mean(
                    t["first_step"] - p for p, t in zip(process, launched, strict=True)
                ),
                3,
            ),
        }
    warm = [t["warm"] for t in trials if "warm" in t]
    if warm:
        summary["warm_trials"] = sum(1 for w in warm if w)
        for mode, name in ((True, "warm_mean"), (False, "cold_mean")):
            of_mode = [t["startup_s"] for t in started if t.get("warm") is mode]
            if of_mode:
                summary["startup_s"][name] = round(statistics.mean(of_mode), 3)
    return summary


# --- Strata -----------------------------------------------------------------------------------


def strata_trial(cluster: Cluster, trial: dict[str, Any], t0: float) -> dict[str, Any]:
    """A trial's record from its job: its row, events, metric points and chief's log."""
    job_id = trial["job_id"]
    job = cluster.job(job_id)
    events = cluster.events(job_id)
    metrics = cluster.http.get(
        f"/jobs/{job_id}/metrics", params={"names": ["val_loss", "epoch"], "task": "chief:0"}
    ).json()
    series = {s["name"]: s for s in metrics["series"]}
    reports: dict[int, float] = {}
    if "val_loss" in series and "epoch" in series:
        epoch_at = dict(zip(series["epoch"]["steps"], series["epoch"]["values"], strict=True))
        val = series["val_loss"]
        for step, wall in zip(val["steps"], val["wall_times"], strict=True):
            if epoch_at.get(step) is not None:
                reports[int(epoch_at[step])] = wall
    first_step = None
    for line in cluster.logs(job_id, "chief:0"):
        if found := FIRST_STEP.search(line):
            first_step = float(found.group(1))
            break
    starts = [
        e["message"]
        for e in events
        if e["task"] == "chief:0" and e["message"] and " started " in e["message"]
    ]
    cancelled = [
        epoch_seconds(e["at"])
        for e in events
        if e["task"] is None and e["to_status"] == "cancelled"
    ]
    if trial["status"] == "pruned" and cancelled:
        ended = cancelled[0]
    else:
        # When the sweep had its result and gave its slot to the next trial: a trial that
        # reached the full resource ends then, while its job finishes on its own.
        ended = epoch_seconds(trial["finished_at"] or job["finished_at"])
    record = split_trial(
        number=trial["number"],
        params=trial["params"],
        status=trial["status"],
        value=trial["value"],
        curve=[list(point) for point in trial["curve"]],
        reports=reports,
        created=epoch_seconds(job["created_at"]),
        first_step=first_step,
        ended=ended,
        t0=t0,
    )
    started = [epoch_seconds(e["at"]) for e in events if e["message"] in starts]
    if started:
        record["task_started"] = round(started[0] - t0, 3)  # the agent's start, as recorded
    record["reason"] = trial["reason"]
    record["events"] = [
        [round(epoch_seconds(e["at"]) - t0, 3), e["task"], e["to_status"], e["message"]]
        for e in events
    ]
    record["job_id"] = job_id
    record["start_events"] = starts
    record["warm"] = any("started warm" in m for m in starts)
    return record


def strata_repetition(cluster: Cluster, spec: dict[str, Any], settings: SweepSettings) -> Any:
    t0 = time.time()
    answer = cluster.http.post("/sweeps", json=spec)
    answer.raise_for_status()
    sweep_id = answer.json()["id"]
    deadline = time.monotonic() + SWEEP_TIMEOUT
    sweep = answer.json()
    while sweep["status"] not in ENDED:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"sweep {sweep_id} still {sweep['status']} after {SWEEP_TIMEOUT:.0f} s: "
                f"{[(t['number'], t['status'], t['job_status']) for t in sweep['trials']]}"
            )
        time.sleep(0.25)
        sweep = cluster.http.get(f"/sweeps/{sweep_id}").json()
    observed = time.time()
    wall = epoch_seconds(sweep["finished_at"]) - t0
    trials = [strata_trial(cluster, trial, t0) for trial in sweep["trials"]]
    summary = summarise_side(trials, wall=wall, parallel=settings.parallel, epochs=settings.epochs)
    summary |= {
        "status": sweep["status"],
        "reason": sweep["reason"],
        "observed_wall_s": round(observed - t0, 3),
        "sweep_id": sweep_id,
        "sweep_best": sweep["best"]["value"] if sweep["best"] else None,
    }
    return {"summary": summary, "trials": trials}


# --- Ray Tune -------------------------------------------------------------------------------


def ray_trial(number: int, record: dict[str, Any], t0: float, epochs: int) -> dict[str, Any]:
    results = record["results"]
    curve = [[r["epoch"], r["val_loss"]] for r in results]
    reports = {int(r["epoch"]): float(r["reported_at"]) for r in results}
    if record.get("error"):
        status = "failed"
    elif results and results[-1]["epoch"] >= epochs:
        status = "succeeded"
    else:
        status = "pruned"
    config = record["config"]
    trial = split_trial(
        number=number,
        params={"lr": config["lr"], "units": config["units"]},
        status=status,
        value=curve[-1][1] if status == "succeeded" else None,
        curve=curve,
        reports=reports,
        created=record["added"],
        first_step=results[0]["first_step"] if results else None,
        ended=record["ended"],
        t0=t0,
    )
    if results:
        trial["entered"] = round(results[0]["entered"] - t0, 3)
        trial["tensorflow_imported"] = round(results[0]["imported"] - t0, 3)
    if "started" in record:
        trial["actor_scheduled"] = round(record["started"] - t0, 3)
    return trial


def ray_repetition(seed: int, settings: SweepSettings, workdir: Path) -> Any:
    out = workdir / f"ray-{seed}.json"
    log = workdir / f"ray-{seed}.log"
    with log.open("wb") as sink:
        done = subprocess.run(
            [sys.executable, "-m", "bench.ray_tune_peer", "--seed", str(seed), "--out", str(out)],
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=RAY_TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"the Ray Tune peer exited {done.returncode}:\n{tail}")
    run = json.loads(out.read_text())
    t0 = run["began"]
    trials = [
        ray_trial(number, record, t0, settings.epochs)
        for number, record in enumerate(run["trials"])
    ]
    summary = summarise_side(
        trials, wall=run["ended"] - t0, parallel=settings.parallel, epochs=settings.epochs
    )
    summary |= {
        "ray_init_s": round(run["ray_init_seconds"], 3),
        "background_cores_before": run["background_cores_before"],
    }
    return {"summary": summary, "trials": trials}


# --- the run --------------------------------------------------------------------------------


def timed(side: str, measure: Callable[[], Any]) -> dict[str, Any]:
    """One side of a repetition, with the load average and the machine's CPU around it."""
    load = os.getloadavg()
    busy, began = machine_busy_seconds(), time.monotonic()
    found: dict[str, Any] = measure()
    # Every process's CPU, this side's included, over the side's whole run (start and
    # collection too): how contended the two cores were.
    busy_cores = (machine_busy_seconds() - busy) / (time.monotonic() - began)
    found["summary"]["machine_cores_busy"] = round(busy_cores, 2)
    found["summary"]["load_average_before"] = [round(x, 2) for x in load]
    found["summary"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    summary = found["summary"]
    print(
        f"  {side}: wall {summary['wall_s']:.1f} s, best {summary['best_value']}, "
        f"{summary['pruned']} pruned, start-up {summary['startup_s']['sum']:.1f} s, "
        f"training {summary['training_s']['sum']:.1f} s, decisions "
        f"{summary['decision_s']['sum']:.2f} s, idle slots {summary['idle_slot_s']:.1f} s"
        + (f", {summary['warm_trials']} warm" if "warm_trials" in summary else ""),
        flush=True,
    )
    return found


def measure(repetitions: int, seed: int, workdir: Path, pool: int) -> list[dict[str, Any]]:
    spec = load_sweep_spec()
    settings = settings_from_spec(spec)
    conditions = Conditions(max_wait=20.0, wait_budget=240.0)
    os.environ["STRATA_AGENT_WARM_POOL"] = str(pool)
    done: list[dict[str, Any]] = []
    with local_cluster(workdir / "cluster", agents=AGENTS, gpus_per_agent=2) as cluster:
        for number in range(repetitions):
            rep_seed = seed + number
            order = SIDES if number % 2 == 0 else SIDES[::-1]
            repetition: dict[str, Any] = {"seed": rep_seed, "order": "-".join(order)}
            print(f"repetition {number + 1}/{repetitions} (seed {rep_seed}, {order})", flush=True)
            for side in order:
                if side == "strata":
                    wait_pools_full(cluster, pool)
                    background = conditions.wait_quiet()
                    trial_spec = {**spec, "sampler": {**spec["sampler"], "seed": rep_seed}}
                    repetition[side] = timed(
                        side, functools.partial(strata_repetition, cluster, trial_spec, settings)
                    )
                    repetition[side]["summary"]["background_cores_before"] = background
                else:
                    # Strata's pools refill after its sweep; not while Ray Tune is measured.
                    wait_pools_full(cluster, pool)
                    repetition[side] = timed(
                        side, functools.partial(ray_repetition, rep_seed, settings, workdir)
                    )
            strata, ray = repetition["strata"]["summary"], repetition["ray"]["summary"]
            repetition["ratio"] = round(strata["wall_s"] / ray["wall_s"], 4)
            print(f"  Strata ÷ Ray Tune wall: {repetition['ratio']:.3f}", flush=True)
            done.append(repetition)
    return done


def side_summary(repetitions: list[dict[str, Any]], side: str) -> dict[str, Any]:
    runs = [r[side]["summary"] for r in repetitions]
    best = [r["best_value"] for r in runs if r["best_value"] is not None]
    summary: dict[str, Any] = {
        "wall_s": spread([r["wall_s"] for r in runs]),
        "best_value": spread(best) if best else None,
        "pruned": spread([r["pruned"] for r in runs]),
        "epochs_trained": spread([r["epochs_trained"] for r in runs]),
        "startup_s_sum": spread([r["startup_s"]["sum"] for r in runs]),
        "startup_s_mean": spread([r["startup_s"]["mean"] for r in runs]),
        "training_s_sum": spread([r["training_s"]["sum"] for r in runs]),
        "decision_s_sum": spread([r["decision_s"]["sum"] for r in runs]),
        "decision_s_mean": spread([r["decision_s"]["mean"] or 0.0 for r in runs]),
        "end_s_sum": spread([r["end_s"]["sum"] for r in runs]),
        "idle_slot_s": spread([r["idle_slot_s"] for r in runs]),
    }
    for key in ("to_process_mean", "in_process_mean", "warm_mean", "cold_mean"):
        found = [r["startup_s"][key] for r in runs if key in r["startup_s"]]
        if found:
            summary[f"startup_s_{key}"] = spread(found)
    summary["pruned_at_last_epoch"] = spread([r["pruned_at_last_epoch"] for r in runs])
    summary["best_any_trial"] = spread([r["best_any_trial"] for r in runs])
    if side == "strata":
        summary["warm_trials"] = spread([r.get("warm_trials", 0) for r in runs])
    return summary


def summarise(result: dict[str, Any]) -> None:
    """(Re)computes every summary of a result from its raw trials, in place."""
    settings = result["settings"]
    for repetition in result["repetitions"]:
        for side in SIDES:
            found = repetition[side]
            found["summary"] |= summarise_side(
                found["trials"],
                wall=found["summary"]["wall_s"],
                parallel=settings["parallel"],
                epochs=settings["epochs"],
            )
        strata, ray = repetition["strata"]["summary"], repetition["ray"]["summary"]
        repetition["ratio"] = round(strata["wall_s"] / ray["wall_s"], 4)
    result["summary"] = {
        "ratio": spread([r["ratio"] for r in result["repetitions"]]),
        **{side: side_summary(result["repetitions"], side) for side in SIDES},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7, help="repetition i uses seed + i")
    parser.add_argument(
        "--warm-pool",
        type=int,
        default=WARM_POOL,
        help="warm processes per agent, all ready before each repetition",
    )
    parser.add_argument(
        "--summarise-only",
        action="store_true",
        help="recompute the summaries of bench/results/sweeps.json from its raw trials",
    )
    args = parser.parse_args(argv)
    if args.summarise_only:
        found = json.loads((RESULTS / "sweeps.json").read_text())
        summarise(found)
        write_result("sweeps", found)
        print(json.dumps(found["summary"], indent=2))
        return 0
    began = time.monotonic()
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="strata-bench-sweeps-") as tmp:
        repetitions = measure(args.repetitions, args.seed, Path(tmp), args.warm_pool)
    settings = settings_from_spec(load_sweep_spec())
    result = {
        "machine": machine,
        "measured_on": measured_on(),
        "spec": str(SWEEP_SPEC.relative_to(REPO)),
        "settings": settings.__dict__,
        "ray": ray_version(),
        "warm_pool_per_agent": args.warm_pool,
        "agents": AGENTS,
        "target": TARGET,
        "repetitions": repetitions,
        "summary": {
            "ratio": spread([r["ratio"] for r in repetitions]),
            **{side: side_summary(repetitions, side) for side in SIDES},
        },
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.monotonic() - began, 1),
    }
    write_result("sweeps", result)
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
