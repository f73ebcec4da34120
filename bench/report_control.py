"""The control plane's sections of docs/benchmarks.md: recovery times and scale."""

from __future__ import annotations

from typing import Any

from bench.harness import spread
from bench.text import spread_text

RECOVERY_WHAT = {
    "worker": "PS worker SIGKILLed → restarted alone, its closures running again",
    "ps": "ps SIGKILLed → ps and chief restarted, chief training from its backup",
    "chief": "chief SIGKILLed → chief restarted, training from its backup",
    "host": "agent SIGKILLed (its host lost) → job re-placed, chief training again",
    "drain": "host drained (an interruption) → checkpoint, its tasks and the chief moved, "
    "chief training again",
    "server": "server SIGKILLed and started again → nothing restarts; points flow again",
}


WARM_WORKER_TARGET = 3.0  # s, a PS worker's recovery with a warm start (issue 21)
WARM_RATIO_TARGET = 0.6  # warm ÷ cold, ps and chief recovery
WARM_DRAIN_TARGET = 10.0  # s, a drained host's job training again, warm


def _spread(values: dict[str, float]) -> str:
    return spread_text(values, digits=2, unit=" s")


def recovery_rows(recovery: dict[str, Any]) -> list[list[str]]:
    """Summary rows: checkpoint-now latency and the worker's recovery against its target."""
    rows = []
    now = recovery.get("checkpoint_now")
    if now:
        rows.append(
            [
                f"Checkpoint now: request → written ({now['requests']} requests)",
                _spread(now["seconds"]),
                "≤ 2 s",
                "yes" if now["seconds"]["median"] <= 2 else "no",
            ]
        )
    worker = recovery.get("scenarios", {}).get("worker")
    if worker:
        target = recovery["tensorflow_import_seconds"]["median"] + 1
        rows.append(
            [
                "PS worker back in training after SIGKILL",
                _spread(worker["seconds"]),
                f"≤ TF import + 1 s = {target:.2f} s",
                "yes" if worker["seconds"]["median"] <= target else "no",
            ]
        )
    warm = recovery.get("warm_scenarios", {})
    if "worker" in warm:
        median = warm["worker"]["seconds"]["median"]
        rows.append(
            [
                "PS worker back in training after SIGKILL, warm start",
                _spread(warm["worker"]["seconds"]),
                f"≤ {WARM_WORKER_TARGET:.1f} s",
                "yes"
                if median <= WARM_WORKER_TARGET
                else f"no (+{median - WARM_WORKER_TARGET:.2f} s)",
            ]
        )
    if "drain" in warm:
        median = warm["drain"]["seconds"]["median"]
        rows.append(
            [
                "Host drained → its job training again elsewhere, warm start",
                _spread(warm["drain"]["seconds"]),
                f"≤ {WARM_DRAIN_TARGET:.0f} s",
                "yes" if median <= WARM_DRAIN_TARGET else "no",
            ]
        )
    cold = recovery.get("scenarios", {})
    for name in ("ps", "chief"):
        if name in warm and name in cold:
            ratio = warm[name]["seconds"]["median"] / cold[name]["seconds"]["median"]
            rows.append(
                [
                    f"{name} recovery, warm ÷ cold (same run)",
                    f"{ratio:.2f}",
                    f"≤ {WARM_RATIO_TARGET}",
                    "yes" if ratio <= WARM_RATIO_TARGET else "no",
                ]
            )
    return rows


def recovery_section(recovery: dict[str, Any]) -> list[str]:
    floor = recovery["tensorflow_import_seconds"]
    lines = [
        "## Recovery: kill → training resumed",
        "",
        "`bench/recovery.py`: the digits example under parameter_server (1 chief, 2 workers,",
        "1 ps; restart policy on_failure, no backoff) on `strata server` and two `strata agent`",
        "processes, plus a third agent to lose. Once the chief reports steady batch progress,",
        "one part is SIGKILLed; resumed is the wall time of the first metric point that shows",
        "training going again (the runtime stamps points as it observes them, on this same",
        "machine).",
        f"{recovery['runs_per_scenario']} run(s) per scenario; median [min-max]. Cold: the",
        "job asks for cold starts (`warm_start: false`); warm: the agents keep"
        f" {recovery.get('warm_pool_per_agent', '?')} warm processes each (TensorFlow imported),",
        "refilled before the kill; cold and warm runs alternate in the same cluster.",
        "",
        "| Killed | What has to happen | Cold: kill → training resumed | Warm | Warm ÷ cold |",
        "| --- | --- | --- | --- | --- |",
    ]
    machine = recovery.get("machine", {})
    load, cores = machine.get("load_average_at_start", [0.0])[0], machine.get("nproc", 0)
    if cores and load > cores:
        lines[-3:-3] = [
            f"This run shared the machine: load average {load:.1f} at its start on {cores}"
            " cores (other work), so absolute times are inflated and the cold/warm ratio,",
            "taken within the run, is the comparison.",
        ]
    warm_runs = recovery.get("warm_scenarios", {})
    for name, summary in recovery.get("scenarios", {}).items():
        warm = warm_runs.get(name)
        if warm:
            started = warm.get("started_warm")
            count = (
                f" ({started} of {len(warm['runs'])} started warm)" if started is not None else ""
            )
            ratio = warm["seconds"]["median"] / summary["seconds"]["median"]
            warm_text, ratio_text = f"{_spread(warm['seconds'])}{count}", f"{ratio:.2f}"
        else:
            warm_text = ratio_text = "—"
        earlier = "" if summary.get("date", "") >= machine.get("date", "") else " (an earlier run)"
        lines.append(
            f"| {name} | {RECOVERY_WHAT.get(name, name)}{earlier} | {_spread(summary['seconds'])} "
            f"| {warm_text} | {ratio_text} |"
        )
    lines += [
        "",
        f"The floor for any restarted process is TensorFlow's import: {_spread(floor)} for a",
        "fresh `python -c 'import tensorflow'` here. A restarted worker also waits for the",
        "coordinator, which re-adds a worker only once it answers again and then rebuilds its",
        "datasets there; its return is read from `worker:<i>/resumed`, which the chief's",
        "runtime stamps with the end of the worker's first closure after it came back. ps,",
        "chief and host recoveries also restore the backup, and a lost host",
        "is noticed only after the heartbeat timeout (4 s in this cluster).",
    ]
    idle = recovery.get("warm_pool_idle")
    if idle and idle.get("processes"):
        lines += [
            "",
            f"Idle warm pool (all {idle['processes']} warm processes of the cluster's agents,",
            "before any job): together they used"
            f" {idle['cpu_cores']:.4f} cores over 10 s (blocked in a read); each holds"
            f" {spread_text(idle['rss_mib'], digits=0, unit=' MiB')} resident, of which"
            f" {spread_text(idle['pss_mib'], digits=0, unit=' MiB')} its own share (PSS:"
            " pages shared with the other warm processes, the libraries, split among them).",
        ]
    lines += _phase_lines(recovery)
    server = recovery.get("scenarios", {}).get("server")
    if server and server["runs"] and "outage_seconds" in server["runs"][0]:
        outages = [run["outage_seconds"] for run in server["runs"]]
        during = [run["points_made_during_outage"] for run in server["runs"]]
        lines += [
            "",
            "A server restart does not interrupt training: no task restarted in any run (the",
            "benchmark fails if one does). The server was healthy again",
            f"{_spread(spread(outages))} after the kill (a new process: Python, imports, the",
            "migrations check); the chief kept training meanwhile, and the",
            f"{min(during)}-{max(during)} points it observed during the outage were delivered",
            "once its runtime reconnected, with their original times.",
        ]
    now = recovery.get("checkpoint_now")
    if now:
        lines += [
            "",
            f"Checkpoint now on a running job ({now['requests']} requests, a second apart):",
            f"written {_spread(now['seconds'])} after the request, as the answer reports it;",
            f"the request's own round trip {_spread(now['round_trip_seconds'])}. The chief",
            "saves at its next step boundary, so the time is one step plus the write (~60 KB).",
        ]
    return [*lines, ""]


def _phase_lines(recovery: dict[str, Any]) -> list[str]:
    """Where each restart's time went, from the job's events."""
    floor = recovery["tensorflow_import_seconds"]["median"]
    lines = []
    for name, summary in recovery.get("scenarios", {}).items():
        if "restarted_s" not in summary:
            continue
        warm = recovery.get("warm_scenarios", {}).get(name)
        if warm and "restarted_s" in warm:
            total, restarted = warm["seconds"]["median"], warm["restarted_s"]["median"]
            listening = warm.get("listening_s", {}).get("median")
            served = (
                f"its server listened after {listening:.2f} s; the remaining "
                f"{total - listening:.2f} s are the cluster taking it back (the coordinator's "
                "channel reconnecting, its remote context rebuilt) and, for a worker, its "
                "dataset rebuilt and its first closure run, for a ps the chief's restart and "
                "backup restored, until it is seen training."
                if listening is not None
                else f"the remaining {total - restarted:.2f} s are the task's own start with "
                "TensorFlow already imported (the server listening, the cluster taking it back, "
                "and for ps and chief the backup restored) until it is seen training."
            )
            lines.append(
                f"- **{name}, warm** ({total:.2f} s): the new attempt was reported started "
                f"after {restarted:.2f} s, in a warm process; {served}"
            )
        total, restarted = summary["seconds"]["median"], summary["restarted_s"]["median"]
        exit_seen = summary.get("exit_recorded_s", {}).get("median")
        seen = f"the exit was recorded after {exit_seen:.2f} s, " if exit_seen is not None else ""
        lines.append(
            f"- **{name}** ({total:.2f} s): {seen}the new attempt's process was reported "
            f"started after {restarted:.2f} s (the control plane's part); the remaining "
            f"{total - restarted:.2f} s belong to the new process: TensorFlow's import "
            f"({floor:.2f} s alone) and {max(0.0, total - restarted - floor):.2f} s more "
            "to join the cluster and be seen training."
        )
    if not lines:
        return []
    return ["", "Where the time went (medians; events stamped by the server):", "", *lines]


# The targets at 1,000 agents, on each database: (what, result key, limit, unit).
SCALE_TARGETS: tuple[tuple[str, str, float, str], ...] = (
    ("every job running after the first submission", "place_and_start_seconds", 15.0, "s"),
    ("GET /jobs p99", "get_jobs", 50.0, "ms"),
    ("GET /cluster p99", "get_cluster", 100.0, "ms"),
    ("GET /jobs/{id} p99", "get_job", 30.0, "ms"),
    ("POST /jobs p99", "post_jobs", 100.0, "ms"),
    ("server CPU on heartbeats alone", "server_cores_heartbeats_only", 0.2, "cores"),
    ("server RSS", "server_rss_mib", 400.0, "MiB"),
)
TARGET_AGENTS = 1000


def _figure(run: dict[str, Any], key: str) -> float | None:
    value = run.get(key)
    if isinstance(value, dict):
        return float(value["p99_ms"])
    return None if value is None else float(value)


def _database(run: dict[str, Any]) -> str:
    return "PostgreSQL" if run.get("database") == "postgresql" else "SQLite"


def _figure_text(value: float) -> str:
    """Three significant digits, without an exponent for a figure of a thousand or more."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _target_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run the targets are judged on: the one at TARGET_AGENTS, else the largest."""
    at_target = [run for run in runs if run["agents"] == TARGET_AGENTS]
    return at_target[-1] if at_target else max(runs, key=lambda run: run["agents"])


def _heartbeat_cores(run: dict[str, Any]) -> str:
    """Heartbeats alone, and the 10 s before them (last starts confirmed) where measured."""
    alone = f"{run['server_cores_heartbeats_only']:.2f} cores"
    settling = run.get("server_cores_settling")
    return alone if settling is None else f"{alone} ({settling:.2f} settling)"


def _lock_text(run: dict[str, Any]) -> str:
    """How much of the placement window the controller's lock was held, and by what."""
    held = run.get("placing_lock_held_seconds")
    if not held:
        return ""
    placed = run["place_and_start_seconds"]
    requests, passes = held.get("request", 0.0), held.get("pass", 0.0)
    share = sum(held.values()) / placed
    count = run.get("placing_passes")
    return (
        f"The controller's lock, which every change to jobs and tasks takes, was held "
        f"{share:.0%} of that time: {passes:.1f} s by "
        + (f"{count} reconcile passes" if count else "reconcile passes")
        + f", {requests:.1f} s by the submissions ({1000 * requests / run['agents']:.0f} ms "
        f"each) and {held.get('agent', 0.0):.1f} s by agents' hellos and exits"
        + (
            ", so each change waited for the others; the time it is held, not the "
            "database's, sets the rate. "
            if share >= 0.95
            else ". "
        )
    )


def _cpu_text(run: dict[str, Any]) -> str:
    """The server's own CPU over the placement window, per job."""
    cpu = run.get("placing_server_cpu_seconds")
    if cpu is None:
        return ""
    placed = run["place_and_start_seconds"]
    return (
        f"The server used {cpu:.1f} s of CPU meanwhile ({1000 * cpu / run['agents']:.1f} ms "
        f"per job, {cpu / placed:.2f} cores). "
    )


def scale_rows(scale: dict[str, Any]) -> list[list[str]]:
    """The summary's rows: each target at 1,000 agents (else the largest count measured),
    on each database."""
    rows = [
        [
            f"{_database(run)}, {run['agents']:,} agents, {run['tasks']:,} tasks: all running",
            run["failed"],
            "all running",
            "no",
        ]
        for run in scale["runs"]
        if "failed" in run
    ]
    measured = [run for run in scale["runs"] if "failed" not in run]
    for database in sorted({run.get("database", "sqlite") for run in measured}):
        on_it = [run for run in measured if run.get("database", "sqlite") == database]
        largest = _target_run(on_it)
        at_target = largest["agents"] >= TARGET_AGENTS
        for what, key, limit, unit in SCALE_TARGETS:
            value = _figure(largest, key)
            if value is None:
                continue
            met = (
                ("yes" if value <= limit else f"no (+{_figure_text(value - limit)} {unit})")
                if at_target
                else f"not measured at {TARGET_AGENTS:,}"
            )
            rows.append(
                [
                    f"{_database(largest)}, {largest['agents']:,} agents: {what}",
                    f"{_figure_text(value)} {unit}",
                    f"≤ {limit:g} {unit} at {TARGET_AGENTS:,} agents",
                    met,
                ]
            )
    return rows


def scale_section(scale: dict[str, Any]) -> list[str]:
    lines = [
        "## Scale: simulated agents",
        "",
        "`bench/scale.py`: a fresh `strata server` (SQLite, or a fresh database on a throwaway",
        "PostgreSQL cluster) and N simulated agents, light",
        "clients speaking the real agent protocol over real websockets from 4 processes, each",
        f"declaring {scale['gpus_per_agent']} GPUs and heartbeating as the server says (every",
        "second up to 1,000 agents; every N/1,000 s past that). N parameter_server jobs of 10",
        "tasks (8 one-GPU workers) are submitted at once, 8 requests at a time; the latencies",
        "are measured once all of them run, with every agent heartbeating. The server's CPU on",
        "heartbeats is measured over 10 s, after the 10 s in which it confirms the last starts",
        "(in brackets: a host sent a start is compared with what it runs after 5 s, then is",
        "settled). The server, the agents' processes and the benchmark share the machine's",
        f"{scale['machine'].get('nproc', '?')} cores, and so may other work: the load average",
        "(1 min) at the start and the end of each run is in the last columns, with the commit",
        "it measured.",
        *(["", scale["note"]] if scale.get("note") else []),
        "",
        "| Database | Agents | Tasks | Submit N jobs | All running | GET /jobs p50/p99 | "
        "GET /cluster p50/p99 | GET /jobs/{id} p50/p99 | POST /jobs p50/p99 | "
        "Server CPU, heartbeats | Server RSS | Load average | Measured on |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def latency(run: dict[str, Any], key: str) -> str:
        if key not in run:
            return "not measured"
        return f"{run[key]['p50_ms']:.0f}/{run[key]['p99_ms']:.0f} ms"

    for run in scale["runs"]:
        database = _database(run)
        if "failed" in run:
            lines.append(
                f"| {database} | {run['agents']:,} | {run['tasks']:,} | {run['failed']} |"
                + " |" * 7
                + f" {_loads(run)} | {_measured_on(run)} |"
            )
            continue
        lines.append(
            f"| {database} | {run['agents']:,} | {run['tasks']:,} | "
            f"{run['submit_seconds']:.1f} s | {run['place_and_start_seconds']:.1f} s | "
            f"{latency(run, 'get_jobs')} | {latency(run, 'get_cluster')} | "
            f"{latency(run, 'get_job')} | {latency(run, 'post_jobs')} | "
            f"{_heartbeat_cores(run)} | {run['server_rss_mib']:.0f} MiB | "
            f"{_loads(run)} | {_measured_on(run)} |"
        )
    for run in scale["runs"]:
        where = f"{run['agents']:,} agents on {_database(run)}"
        collections = run.get("full_collections") or {}
        if collections.get("count"):
            lines += [
                "",
                f"With {where} the server made {collections['count']} full "
                "garbage collections over the run (timed by `bench/gc_probe`; py-spy cannot see "
                f"them), each {spread_text(collections['ms'], unit=' ms')}; "
                f"{collections['during_get_jobs']} fell within the "
                f"{collections['get_jobs_seconds']:.0f} s of GET /jobs requests, and a request "
                "that meets one waits for all of it.",
            ]
        for key, what in (
            ("placing_profile", "From the first submission until every job ran"),
            ("heartbeats_profile", "With every job running and nothing asked of it"),
            ("get_jobs_profile", "While GET /jobs was measured"),
        ):
            profile = run.get(key) or {}
            if profile.get("busy_samples"):
                lines += [
                    "",
                    f"{what} with {where}{_sampled_text(run, key)}, {_profile_text(profile)}",
                ]
    return [*lines, ""]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _measured_on(run: dict[str, Any]) -> str:
    on = run.get("measured_on")
    return f"{on['commit']}, {on['date']}" if on else "not recorded"


def _loads(run: dict[str, Any]) -> str:
    loads = run.get("load_average")
    return f"{loads[0]:.1f} → {loads[1]:.1f}" if loads else "not recorded"


def _sampled_text(run: dict[str, Any], key: str) -> str:
    """Where the placement profile came from: a second run of the point, sampled."""
    sampled = run.get("sampled_run")
    if key != "placing_profile" or not sampled or "place_and_start_seconds" not in sampled:
        return ""
    return (
        f" (in a second run of the same point, sampled {run['placing_profile_rate']} times a"
        f" second, where every job ran after {sampled['place_and_start_seconds']:.1f} s against"
        f" {run['place_and_start_seconds']:.1f} s unsampled)"
    )


def _profile_text(profile: dict[str, Any]) -> str:
    stages = ", ".join(f"{name} {pct:.0f}%" for name, pct in profile["stages_pct"].items())
    top = ", ".join(f"`{label}` {pct:.0f}%" for label, pct in profile["self_pct"][:4])
    in_loop = profile.get("event_loop_samples", 0)
    total = profile["busy_samples"] + profile["idle_samples"] + in_loop
    busy = profile["busy_samples"] / total
    loop = (
        f", {100 * in_loop / total:.0f}% inside uvloop (waiting, or its own work: py-spy "
        "cannot tell which)"
        if in_loop
        else ""
    )
    return (
        f"the server was busy in Python in {100 * busy:.0f}% of py-spy's samples (all "
        f"threads){loop}; of those busy: {stages or 'no stage matched'}. Most self time: {top}."
    )


def control_notes(recovery: dict[str, Any] | None, scale: dict[str, Any] | None) -> list[str]:
    """By how much the recovery and scale targets were missed, and what the time went to."""
    notes = []
    worker = (recovery or {}).get("scenarios", {}).get("worker")
    if recovery and worker:
        floor = recovery["tensorflow_import_seconds"]["median"]
        total = worker["seconds"]["median"]
        if total > floor + 1:
            restarted = worker.get("restarted_s", {}).get("median")
            started = (
                f" Strata had the new attempt's process started {restarted:.2f} s after the "
                f"kill; the other {total - restarted:.2f} s are the new process importing "
                f"TensorFlow ({floor:.2f} s alone) and the coordinator taking the worker back "
                "(its channel reconnects, then it rebuilds the worker's remote context and "
                "dataset) until the worker's first closure since ends."
                if restarted is not None
                else ""
            )
            notes.append(
                f"- **PS worker recovery**: {total:.2f} s against {floor + 1:.2f} s (TensorFlow's "
                f"import + 1 s), {total - floor - 1:.2f} s over.{started}"
            )
    warm = (recovery or {}).get("warm_scenarios", {}).get("worker")
    if warm and warm["seconds"]["median"] > WARM_WORKER_TARGET:
        total = warm["seconds"]["median"]
        restarted = warm.get("restarted_s", {}).get("median")
        listening = warm.get("listening_s", {}).get("median")
        served = (
            f" its server listened {listening:.2f} s after the kill (TensorFlow already"
            f" imported); the other {total - listening:.2f} s are the coordinator taking it back"
            " (its channel reconnecting within 0.25 s, its remote context and the worker's"
            " dataset rebuilt) and the worker's first closure since, which ends the count"
            if listening is not None
            else " the rest is the runtime's server starting, the coordinator taking the worker"
            " back and rebuilding its dataset, and its first closure since"
        )
        part = (
            f" The new attempt was reported started {restarted:.2f} s after the kill, in a warm"
            f" process;{served}."
            if restarted is not None
            else ""
        )
        notes.append(
            f"- **PS worker recovery, warm start**: {total:.2f} s against {WARM_WORKER_TARGET:.1f}"
            f" s, {total - WARM_WORKER_TARGET:.2f} s over.{part}"
        )
    measured = [run for run in (scale or {}).get("runs", []) if "failed" not in run]
    for database in sorted({run.get("database", "sqlite") for run in measured}):
        on_it = [run for run in measured if run.get("database", "sqlite") == database]
        largest = _target_run(on_it)
        placed = largest["place_and_start_seconds"]
        if largest["agents"] >= TARGET_AGENTS and placed > 15:
            profile = largest.get("placing_profile") or {}
            loads = largest.get("load_average")
            notes.append(
                f"- **{largest['agents']:,} jobs placed and running on {_database(largest)}**: "
                f"{placed:.0f} s against 15 s ({largest['agents'] / placed:.0f} jobs/s; "
                f"submitting them, 8 requests at a time, took {largest['submit_seconds']:.0f} s "
                "of it"
                + (
                    ": placement kept up with the submissions)"
                    if placed - largest["submit_seconds"] < 1
                    else f"; placing the rest took {placed - largest['submit_seconds']:.1f} s more)"
                )
                + (f", with the machine's load average {_loads(largest)}" if loads else "")
                + ". "
                + _lock_text(largest)
                + _cpu_text(largest)
                + (_sentence(_profile_text(profile)) if profile.get("busy_samples") else "")
            )
        p99, p50 = largest["get_jobs"]["p99_ms"], largest["get_jobs"]["p50_ms"]
        if largest["agents"] >= TARGET_AGENTS and p99 > 50:
            profile = largest.get("get_jobs_profile") or {}
            top = ", ".join(
                f"`{label}` {pct:.0f}%" for label, pct in profile.get("self_pct", [])[:3]
            )
            collections = largest.get("full_collections") or {}
            gc_text = (
                f" The slow ones meet the server's full garbage collections: "
                f"{collections['count']} over the run, each "
                f"{spread_text(collections['ms'], unit=' ms')}, {collections['during_get_jobs']} "
                f"during the {collections['get_jobs_seconds']:.0f} s of requests. Each walks "
                "every object the server holds for its thousand connections and their tasks."
                if collections.get("count")
                else ""
            )
            notes.append(
                f"- **GET /jobs with {largest['agents']:,} agents on {_database(largest)}**: "
                f"p99 {p99:.0f} ms, {p99 - 50:.0f} ms over the 50 ms target; the median request "
                f"takes {p50:.0f} ms, loading a page of 50 jobs with their tasks (most self time "
                f"while measured: {top or 'not profiled'}).{gc_text}"
            )
        cores = largest["server_cores_heartbeats_only"]
        if largest["agents"] >= TARGET_AGENTS and cores > 0.2:
            profile = largest.get("heartbeats_profile") or {}
            notes.append(
                f"- **Server CPU on heartbeats alone, {largest['agents']:,} agents on "
                f"{_database(largest)}**: {cores:.2f} cores against 0.2 "
                f"({largest['agents']:,} heartbeats a second, unchanged running lists left "
                "out). "
                + (_sentence(_profile_text(profile)) if profile.get("busy_samples") else "")
            )
    return notes
