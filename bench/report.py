"""Renders docs/benchmarks.md from the result files under bench/results/.

Each benchmark rewrites its own JSON file and then this page, so the page always shows the
latest run of every benchmark side by side. `python -m bench.report` re-renders it alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.harness import REPO, RESULTS
from bench.report_ab import ab_rows
from bench.report_ab_page import EXPERIMENTS, ab_section
from bench.report_client import client_rows, client_section
from bench.report_control import (
    control_notes,
    recovery_rows,
    recovery_section,
    scale_rows,
    scale_section,
)
from bench.report_launch import dominates_lines, launch_notes, launch_rows, launch_section
from bench.report_replicas import replicas_rows, replicas_section
from bench.report_sweeps import sweeps_rows, sweeps_section
from bench.report_warm import warm_throughput_rows, warm_throughput_section
from bench.text import spread_text as _spread

DOC = REPO / "docs" / "benchmarks.md"
# Prose kept by hand, not generated: the page's last section, so that every render keeps it.
DESIGN_NOTES = Path(__file__).with_name("design_notes.md")

HEADER = """\
# Benchmarks

Measured on the machine at hand by the scripts in `bench/`; the tables below are generated
from `bench/results/*.json` (raw numbers) every time a benchmark runs. Reproduce with:

```sh
.venv/bin/python -m bench.metrics_pipeline [--quick] [--profile]  # 4-8 min; --quick ~1 min
.venv/bin/python -m bench.training_overhead [--quick] [--profile] # 9-12 min; --quick ~2 min
.venv/bin/python -m bench.pg_insert_paths                         # ~30 s, a diagnostic
.venv/bin/python -m bench.gpu_warm_devices                        # a check, on a GPU host
.venv/bin/python -m bench.launch [--quick]                        # five ways to start each job
.venv/bin/python -m bench.warm_throughput [--quick]               # ~16 min; --quick ~4 min
.venv/bin/python -m bench.client_mode [--rounds N] [--quick]      # client vs chief, ~4 min
.venv/bin/python -m bench.recovery [--quick]                      # ~15 min; --quick ~5 min
.venv/bin/python -m bench.scale [--quick]                         # 100 and 1,000 agents
.venv/bin/python -m bench.replicas [--quick]                      # takeover; ~5 min
.venv/bin/python -m bench.sweeps [--warm-pool N]                 # against Ray Tune; ~4 min a round
.venv/bin/python -m bench.plots                                   # the PNGs (matplotlib)
.venv/bin/python -m bench.report                                  # re-render this page only
```

Each starts its own `strata server` (a real subprocess, on a free port, with a temporary data
dir) and, for PostgreSQL, a throwaway cluster from the machine's binaries, configured as in the
test suite (`fsync=off`, `synchronous_commit=off`); nothing outside the run is touched.
`--profile` also samples the server (or the training chief, in an extra pair that is not
summarised) with py-spy into `bench/results/profiles/`.
"""


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _counted(summarised: int, runs: list[dict[str, Any]]) -> str:
    """'3' when every run counted, '3 of 5' when disturbed runs were left out, 'all 3
    disturbed' when none was undisturbed (the summary then uses them all)."""
    if runs and all(run.get("disturbed") for run in runs):
        return f"all {len(runs)} disturbed"
    return str(summarised) if summarised == len(runs) else f"{summarised} of {len(runs)}"


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


# --- the machine -----------------------------------------------------------------------------


def machine_section(pipeline: dict[str, Any] | None, training: dict[str, Any] | None) -> list[str]:
    lines = ["## Machine", ""]
    for name, data in (("metrics_pipeline", pipeline), ("training_overhead", training)):
        if data is None:
            continue
        m = data["machine"]
        versions = f"Python {m['python']}, SQLite {m['sqlite']}"
        if "postgresql" in m:
            versions += f", PostgreSQL {m['postgresql']}"
        if "tensorflow" in m:
            versions += f", TensorFlow {m['tensorflow']}"
        load = m["load_average_at_start"]
        lines.append(
            f"- `{name}` ran {m['date']} on {m['nproc']} cores ({m['cpu_model']}), "
            f"kernel {m['kernel']}; {versions}; load average at start "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)."
        )
    lines += [
        "",
        "The benchmark's clients, the server and PostgreSQL all share those cores, and the "
        "machine is shared with other work: every run records the CPU seconds used by the "
        "server, PostgreSQL, the benchmark process, the subscribers and *others* (everything "
        "else on the machine) over its interval, shown below as cores busy. Before each run "
        "the benchmark waits (up to 20 s, 90 s per invocation in all) for the background load "
        "to drop below 0.3 cores. A run during which *others* used more than 0.5 cores is "
        "marked *disturbed* and made up for by another run (at most 2 more per measurement); "
        "summaries use the undisturbed runs, or all of them when every run was disturbed.",
        "",
    ]
    return lines


# --- the summary -----------------------------------------------------------------------------


def _latency_row(label: str, scenario: dict[str, Any], target: float | None) -> list[str]:
    received = "all points received" if scenario["all_received"] else "**points missing**"
    runs = _counted(scenario["summarised_runs"], scenario["runs"])
    result = (
        f"p99 {_spread(scenario['p99_ms'], 0, ' ms')}; p50 {scenario['p50_ms']['median']:.0f} ms, "
        f"max {scenario['max_ms']:.0f} ms ({runs} runs); {received} ({_n(scenario['sent'])})"
    )
    if target is None:
        return [label, result, "—", "—"]
    ok = scenario["p99_ms"]["median"] <= target and scenario["all_received"]
    return [label, result, f"p99 ≤ {target:.0f} ms, all received", _met(ok)]


def summary_rows(pipeline: dict[str, Any]) -> list[list[str]]:
    targets = pipeline["targets"]
    rows = []
    for database, label in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        ingest = pipeline[database]["ingest"]
        rows.append(
            [
                f"Ingest into {label}, points/s stored and acked "
                f"({ingest['channels']} channels x {_n(ingest['batch'])}-point batches)",
                f"{_spread(ingest['points_per_s'])} "
                f"({_counted(ingest['summarised_runs'], ingest['runs'])} runs)",
                f"≥ {_n(targets['ingest_points_per_s'])}",
                _met(ingest["points_per_s"]["median"] >= targets["ingest_points_per_s"]),
            ]
        )
    for database, label in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        for scenario in pipeline[database].get("latency", []):
            target = (
                targets["latency_p99_ms"] if scenario["rate"] >= targets["latency_rate"] else None
            )
            rows.append(
                _latency_row(
                    f"Latency put() → websocket, {_n(scenario['rate'])} points/s, {label}",
                    scenario,
                    target,
                )
            )
    fanout = pipeline["sqlite"].get("fanout")
    if fanout:
        rows.append(
            _latency_row(
                f"Same, {_n(fanout['rate'])} points/s, {fanout['subscribers']} subscribers, SQLite",
                fanout,
                targets["latency_p99_ms"],
            )
        )
    return rows


def training_summary_row(training: dict[str, Any]) -> list[str]:
    ratio = training["ratio"]
    return [
        "Training steps/s, streaming on ÷ off (digits PS job, chief)",
        f"{_spread(ratio, 3)} ({_counted(training['summarised_pairs'], training['pairs'])} "
        "A/B pairs)",
        f"≥ {training['target']:.2f}",
        _met(ratio["median"] >= training["target"]),
    ]


# --- details -----------------------------------------------------------------------------------


def _cpu_cell(run: dict[str, Any], seconds: float) -> str:
    """CPU seconds by whom, as cores busy over the run."""
    order = ("server", "postgres", "bench", "subscribers", "others")
    cpu = run["cpu_seconds"]
    return ", ".join(f"{k} {_cores(cpu[k] / seconds)}" for k in order if k in cpu)


def _cores(value: float) -> str:
    # "others" is a difference of two counters read moments apart: clamp the jitter at zero.
    return f"{max(0.0, value):.2f}"


def _labelled_runs(measurement: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Runs numbered in order; disturbed ones marked, as they are left out of summaries
    (unless every run was disturbed)."""
    return [
        (f"{i} (disturbed)" if run.get("disturbed") else str(i), run)
        for i, run in enumerate(measurement["runs"], 1)
    ]


def ingest_section(pipeline: dict[str, Any]) -> list[str]:
    lines = [
        "## Metric ingest",
        "",
        "Four runtime channels (`/tasks/connect`, task token, `task_hello`) each send "
        f"{_n(pipeline['plan']['ingest_points_per_task'])} points in `MetricBatch` frames of "
        f"{_n(pipeline['plan']['batch'])} points, stop-and-wait like `MetricSender` (the next "
        "batch goes when the ack for the last one is back). The clock runs from the first "
        "send to the last ack; an ack means the points are committed. Every run uses a fresh "
        "job, and afterwards the stored rows are counted in the database and must equal the "
        "points sent. The load generator is cheap: all frames are serialised before the clock "
        "starts, so while timed it only sends and reads acks (see its CPU below). Like the real "
        "sender it negotiates permessage-deflate, which the server accepts.",
        "",
    ]
    rows = []
    for database in ("sqlite", "postgresql"):
        for label, run in _labelled_runs(pipeline[database]["ingest"]):
            rows.append(
                [
                    database,
                    label,
                    _n(run["points"]),
                    f"{run['seconds']:.2f}",
                    _n(run["points_per_s"]),
                    f"{1e6 * run['cpu_seconds']['server'] / run['points']:.1f}",
                    _cpu_cell(run, run["seconds"]),
                ]
            )
    header = (
        "database",
        "run",
        "points",
        "s",
        "points/s",
        "server CPU µs/point",
        "cores busy during the run",
    )
    return [*lines, *_table(header, rows), ""]


def latency_section(pipeline: dict[str, Any]) -> list[str]:
    plan = pipeline["plan"]
    lines = [
        "## End-to-end latency: `put()` → job-stream websocket",
        "",
        f"Four real `MetricSender`s (tasks {', '.join(pipeline['tasks'])}; each its own "
        "daemon thread and websocket, as in four training processes) get `put()` calls from "
        "one generator thread at a steady total rate, in 10 ms ticks, each point stamped "
        "with `time.time()` as its wall_time. A separate process (like a browser, so its CPU "
        "does not contend for the senders' GIL) subscribes to `/jobs/{id}/stream` and stamps "
        "each metrics frame on arrival, before parsing; a point's latency is that time minus "
        "its wall_time. The sender batches every ~100 ms by design, so about 50 ms of the "
        "median is the batching interval itself. After the run the senders flush, and every "
        "subscriber must have received exactly the points sent per task. "
        f"{plan['latency_runs']} run(s) of {plan['latency_seconds']:.0f} s per row.",
        "",
    ]
    rows = []
    scenarios = [
        (db, s) for db in ("sqlite", "postgresql") for s in pipeline[db].get("latency", [])
    ]
    if "fanout" in pipeline["sqlite"]:
        scenarios.append(("sqlite", pipeline["sqlite"]["fanout"]))
    for database, scenario in scenarios:
        for label, run in _labelled_runs(scenario):
            lat = run["latency_ms"]
            rows.append(
                [
                    database,
                    _n(scenario["rate"]),
                    str(scenario["subscribers"]),
                    label,
                    f"{lat['p50']:.0f} / {lat['p99']:.0f} / {lat['max']:.0f}",
                    "{p50:.0f} / {p99:.0f} / {max:.0f}".format(**run["server_path_ms"]),
                    f"{min(run['received_per_subscriber']):,} / {run['sent']:,}",
                    _cpu_cell(run, run["seconds"]),
                ]
            )
    header = (
        "database",
        "points/s",
        "subscribers",
        "run",
        "latency p50 / p99 / max ms",
        "of which server path p50 / p99 / max ms",
        "received / sent",
        "cores busy during the run",
    )
    return [*lines, *_table(header, rows), ""]


def profile_section(pipeline: dict[str, Any]) -> list[str]:
    profiles = pipeline.get("profiles")
    if not profiles:
        return []
    lines = [
        "### Where the server's time goes (py-spy, first run of each row)",
        "",
        "Shares of the server's busy samples (idle event-loop waits excluded) spent in each "
        "stage, inclusive of what the stage calls; a sample can count in two stages.",
        "",
    ]
    stages: list[str] = []
    for summary in profiles.values():
        stages += [s for s in summary.get("stages_pct", {}) if s not in stages]
    rows = [
        [name, _n(summary.get("busy_samples", 0))]
        + [f"{summary.get('stages_pct', {}).get(stage, 0):.0f}%" for stage in stages]
        for name, summary in profiles.items()
    ]
    return [*lines, *_table(["profile", "busy samples", *stages], rows), ""]


def training_section(training: dict[str, Any]) -> list[str]:
    config = training["config"]
    lines = [
        "## Training throughput: streaming on vs off",
        "",
        f"`examples/digits.py` as a parameter-server job run by hand (1 chief, "
        f"{config['workers']} workers, 1 ps on localhost; workers and ps are "
        "`python -m agents.runtime.server`), "
        f"{config['epochs']} epochs x {config['steps_per_epoch']} steps, batch "
        f"{config['batch']}. **A**: the chief has STRATA_SERVER, STRATA_TASK, STRATA_ATTEMPT, "
        "STRATA_TASK_TOKEN and STRATA_JOB_ID for a job on a real server (SQLite), so "
        "`runtime.callbacks()` streams metrics (after each A run the job's stored points are "
        "counted: they must be there); **B**: none of them, so `runtime.callbacks()` returns "
        "`[]` (checked once per invocation by calling it in that environment). Steps/s is "
        "timed by the benchmark from the chief's epoch lines as they arrive, from the end of "
        "its first epoch to the end of its last (process start, cluster connection and the "
        "first, tracing epoch excluded). Pairs alternate their order (AB, BA, AB, ...), so "
        "whatever drifts within a pair does not always favour one side; the ratio is per pair. "
        "Every run starts all four processes afresh on new ports. The cores columns split the "
        "CPU of our processes: the chief, the TensorFlow servers (2 workers and the ps) and "
        "the `strata server`.",
        "",
    ]
    profiled = training.get("profiled_pair")
    if profiled:
        lines[-1:-1] = [
            "",
            f"With `--profile` an extra pair runs first with py-spy on the chief (A "
            f"{profiled['a']['steps_per_s']:.1f}, B {profiled['b']['steps_per_s']:.1f} steps/s, "
            f"ratio {profiled['ratio']:.3f}); sampling costs CPU here, so it is not summarised.",
        ]
    rows = [
        [
            i,
            pair.get("order", "AB"),
            f"{pair['a']['steps_per_s']:.1f}",
            f"{pair['b']['steps_per_s']:.1f}",
            f"{pair['ratio']:.3f}",
            str(pair["a"].get("points_stored", "—")),
            f"{_by_process(pair['a'])} / {_by_process(pair['b'])}",
            f"{_cores(pair['a']['others_cores'])} / {_cores(pair['b']['others_cores'])}",
        ]
        for i, pair in _labelled_runs({"runs": training["pairs"]})
    ]
    header = (
        "pair",
        "order",
        "A steps/s (streaming)",
        "B steps/s (plain)",
        "A ÷ B",
        "points stored (A)",
        "cores: chief + TF servers + strata server, A / B",
        "cores used by others, A / B",
    )
    return [*lines, *_table(header, rows), ""]


def _by_process(run: dict[str, Any]) -> str:
    cores = run.get("cores_by_process")
    if not cores:
        return f"{run['our_cores']:.2f}"
    return " + ".join(
        f"{cores[k]:.2f}" for k in ("chief", "tf_servers", "strata_server") if k in cores
    )


def pg_paths_section(paths: dict[str, Any]) -> list[str]:
    lines = [
        "### PostgreSQL: CPU per stored row, by way of inserting it",
        "",
        f"`python -m bench.pg_insert_paths`: {_n(paths['rows'])} rows into the server's own "
        f"`metric_points` table (migrated by the server) in transactions of {_n(paths['batch'])} "
        "rows (four task attempts of 5,000), each way three times, interleaved. One connection, "
        "one transaction at a time, so rows/s is the serial rate; diagnostic only.",
        "",
    ]
    rows = [
        [
            entry["path"],
            _spread(entry["rows_per_s"]),
            _spread(entry["postgres_us_per_row"], 1, " µs"),
            _spread(entry["client_us_per_row"], 1, " µs") if "client_us_per_row" in entry else "—",
        ]
        for entry in paths["paths"]
    ]
    header = ("insert", "rows/s", "PostgreSQL CPU per row", "client CPU per row (asyncpg + Python)")
    return [*lines, *_table(header, rows), ""]


# --- what dominates ------------------------------------------------------------------------


def _median(values: Iterable[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _kept(measurement: dict[str, Any]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = measurement["runs"]
    return [r for r in runs if not r.get("disturbed")] or runs


def _per(runs: list[dict[str, Any]], who: str, per: str) -> float:
    """Median over runs of CPU seconds of `who` per unit of `per` (a run field)."""
    return _median(r["cpu_seconds"][who] / r[per] for r in runs)


def _stage(pipeline: dict[str, Any], profile: str, stage: str) -> str | None:
    """A stage's share of a profile's busy samples, or None when the run was not profiled."""
    share = pipeline.get("profiles", {}).get(profile, {}).get("stages_pct", {}).get(stage)
    return f"{share:.0f}%" if share is not None else None


def ingest_notes(pipeline: dict[str, Any]) -> list[str]:
    sqlite = _kept(pipeline["sqlite"]["ingest"])
    pg = _kept(pipeline["postgresql"]["ingest"])
    server_us = 1e6 * _per(sqlite, "server", "points")
    pg_us = 1e6 * _per(pg, "postgres", "points")
    server_pg_us = 1e6 * _per(pg, "server", "points")
    pg_rate = pipeline["postgresql"]["ingest"]["points_per_s"]["median"]
    validate = _stage(pipeline, "ingest-sqlite", "validate frames (pydantic)")
    sqlite_thread = _stage(pipeline, "ingest-sqlite", "SQLite thread (aiosqlite)")
    profiled = (
        f" In the profile, validating frames into pydantic models takes {validate} of the "
        f"server's busy samples and the SQLite thread (executemany + commit) {sqlite_thread}."
        if validate and sqlite_thread
        else " (Run with --profile for where the server's time goes.)"
    )
    return [
        f"- **Ingest, SQLite**: the server process is the limit. It spends "
        f"{server_us:.1f} µs of CPU per point and runs at "
        f"{_per(sqlite, 'server', 'seconds'):.2f} cores while the load generator uses "
        f"{_per(sqlite, 'bench', 'seconds'):.2f}; one event loop and the aiosqlite thread share "
        f"one GIL, so the ceiling is about {round(1e6 / server_us, -3):,.0f} points/s per "
        f"core.{profiled}",
        f"- **Ingest, PostgreSQL**: {_n(pg_rate)} points/s. Per point, PostgreSQL spends "
        f"{pg_us:.1f} µs of CPU and the server "
        f"{server_pg_us:.1f} µs ({_per(pg, 'postgres', 'seconds'):.2f} + "
        f"{_per(pg, 'server', 'seconds'):.2f} cores busy). The ingestor has two writers on "
        "PostgreSQL, each with its own connection and never two writes of one task attempt at "
        "once, so the server validates and encodes the next frames while PostgreSQL stores "
        "the previous ones; each write is one `INSERT ... SELECT FROM unnest(column arrays)` "
        "per task attempt (the attempt's columns as constants), without ON CONFLICT: the "
        "per-attempt high-water mark already drops resends, and a unique-key violation (a "
        "second server on the same database) is retried once with ON CONFLICT DO NOTHING. "
        "Strictly taking turns, those costs would give "
        f"~{round(1e6 / (pg_us + server_pg_us), -3):,.0f} points/s; fully overlapped, the "
        f"larger alone ~{round(1e6 / max(pg_us, server_pg_us), -3):,.0f}. Before (one writer, "
        "one 8-array unnest with ON CONFLICT per write) it measured 38,971 [34,129-41,687] "
        "points/s, with PostgreSQL at 13.9 µs and the server at 14.8 µs per point, taking "
        f"turns.{_pg_profiled(pipeline)}",
    ]


def _pg_profiled(pipeline: dict[str, Any]) -> str:
    validate = _stage(pipeline, "ingest-postgresql", "validate frames (pydantic)")
    driver = _stage(pipeline, "ingest-postgresql", "PostgreSQL driver (asyncpg)")
    if not (validate and driver):
        return ""
    return (
        f" In the server's profile, validating frames into pydantic models (the protocol's "
        f"models, in the runtime channel) takes {validate} of the busy samples and asyncpg "
        f"(encoding the arrays) {driver}."
    )


def latency_notes(pipeline: dict[str, Any]) -> list[str]:
    notes = []
    for scenario in pipeline["sqlite"].get("latency", []):
        if scenario["rate"] < pipeline["targets"]["latency_rate"]:
            continue
        runs = _kept(scenario)
        total = _median(r["latency_ms"]["p50"] for r in runs)
        path50 = _median(r["server_path_ms"]["p50"] for r in runs)
        path99 = _median(r["server_path_ms"]["p99"] for r in runs)
        notes.append(
            f"- **Latency** ({_n(scenario['rate'])} points/s, SQLite): the sender's batching "
            f"dominates. Of the {total:.0f} ms median, the server path (batch sent → frame at "
            f"the subscriber, ingest and commit included) is {path50:.0f} ms; the rest is the "
            "wait for the next batch: a point put just after a batch left waits up to the "
            "100 ms interval (which runs from each send), then its own server path "
            f"(p99 {path99:.0f} ms)."
        )
    fanout = pipeline["sqlite"].get("fanout")
    rate = fanout["rate"] if fanout else None
    single = [s for s in pipeline["sqlite"].get("latency", []) if s["rate"] == rate]
    if fanout and single:
        one = _per(_kept(single[0]), "server", "seconds")
        many = _per(_kept(fanout), "server", "seconds")
        profile = f"latency-{fanout['rate']}-x{fanout['subscribers']}-sqlite"
        send = _stage(pipeline, profile, "stream send (json + cursor + ws)")
        deflate = _stage(pipeline, profile, "permessage-deflate compress")
        shares = f": {send} and {deflate} of the busy samples" if send and deflate else ""
        notes.append(
            f"- **Fan-out**: {fanout['subscribers']} subscribers take the server from "
            f"{one:.2f} to {many:.2f} cores at {_n(fanout['rate'])} points/s. Each subscriber "
            "gets its own `json.dumps` of the frame plus its cursor, and its own "
            "permessage-deflate compression (the stream socket negotiates it, as browsers "
            f"do){shares}."
        )
    return notes


def training_notes(training: dict[str, Any]) -> list[str]:
    ratio = training["ratio"]
    pairs = undisturbed_pairs(training)
    spread_pct = 100 * (ratio["max"] - ratio["min"])
    note = (
        f"- **Training**: streaming keeps {100 * ratio['median']:.0f}% of plain steps/s "
        f"(median ratio {_spread(ratio, 3)} over {len(pairs)} pairs, "
        f"{training['config']['steps_per_epoch']} steps per epoch). The ratios of single pairs "
        f"span {spread_pct:.0f} percentage points on this shared two-core machine, so a "
        "median a few percent from 1 is within the noise of this many pairs."
    )
    server = _process_cores(pairs, "strata_server")
    if server:
        note += (
            f" Streaming's own cost shows in the `strata server`, which shares the job's two "
            f"cores: {server[0]:.3f} cores during A against {server[1]:.3f} during B (median), "
            "for the small batches the sender posts about every 100 ms."
        )
    note += (
        " Under parameter_server two things were taken off the chief's training thread: "
        "holding every step's RemoteValue, which makes TensorFlow copy the step's outputs back "
        "(`maybe_call_with_output_remote_value`; measured 0.817 when the callback held them "
        "all, now a sample about once per second), and reading the learning rate at every "
        "epoch end, which under PS is a round trip to the parameter server that the training "
        "thread waited for (now read on the callback's resolver thread)."
    )
    profiles = training.get("profiles", {})
    stage = "RemoteValue fetch after each step (worker threads)"
    if profiles:
        on = profiles.get("chief-streaming", {}).get("stages_pct", {}).get(stage, 0.0)
        off = profiles.get("chief-plain", {}).get("stages_pct", {}).get(stage, 0.0)
        note += (
            f" In the chief's profile, the ClusterCoordinator's worker threads spend {on:.0f}% "
            f"of the busy samples (plain: {off:.0f}%) in `RemoteValueImpl.get`, copying a "
            "step's outputs back after it ran, for the steps whose RemoteValue someone still "
            "holds (the callback's sampled batch logs)."
        )
    return [note]


def undisturbed_pairs(training: dict[str, Any]) -> list[dict[str, Any]]:
    pairs: list[dict[str, Any]] = training["pairs"]
    return [p for p in pairs if not p.get("disturbed")] or pairs


def _process_cores(pairs: list[dict[str, Any]], group: str) -> tuple[float, float] | None:
    """Median cores of one group of processes in the A and the B runs, where recorded."""
    a = [p["a"]["cores_by_process"][group] for p in pairs if "cores_by_process" in p["a"]]
    b = [p["b"]["cores_by_process"][group] for p in pairs if "cores_by_process" in p["b"]]
    return (_median(a), _median(b)) if a and b else None


def what_dominates(
    pipeline: dict[str, Any] | None,
    training: dict[str, Any] | None,
    recovery: dict[str, Any] | None = None,
    scale: dict[str, Any] | None = None,
    launch: dict[str, Any] | None = None,
    hand_steps: bool = True,
) -> list[str]:
    lines = ["### What dominates", ""]
    if pipeline:
        lines += ingest_notes(pipeline) + latency_notes(pipeline)
    if training:
        lines += training_notes(training)
    if launch:
        lines += dominates_lines(launch) if hand_steps else []
    lines += control_notes(recovery, scale)
    return [*lines, ""]


def render(
    pipeline: dict[str, Any] | None,
    training: dict[str, Any] | None,
    pg_paths: dict[str, Any] | None = None,
    recovery: dict[str, Any] | None = None,
    scale: dict[str, Any] | None = None,
    launch: dict[str, Any] | None = None,
    warm: dict[str, Any] | None = None,
    ab: dict[str, dict[str, Any]] | None = None,
    client: dict[str, Any] | None = None,
    replicas: dict[str, Any] | None = None,
    sweeps: dict[str, Any] | None = None,
) -> str:
    ab = ab or {}
    hand_steps = "launch_ab" not in ab  # the A/B's main run, where there is one, says it
    lines = [HEADER, *machine_section(pipeline, training), "## Summary", ""]
    rows = summary_rows(pipeline) if pipeline else []
    if training:
        rows.append(training_summary_row(training))
    if launch:
        rows += launch_rows(launch, warm_steps=warm is None, hand_steps=hand_steps)
    if "launch_ab" in ab:
        rows += ab_rows(ab["launch_ab"])
    if warm:
        rows += warm_throughput_rows(warm)
    if client:
        rows += client_rows(client)
    if recovery:
        rows += recovery_rows(recovery)
    if scale:
        rows += scale_rows(scale)
    if replicas:
        rows += replicas_rows(replicas)
    if sweeps:
        rows += sweeps_rows(sweeps)
    lines += _table(("Measurement", "Result: median [min-max]", "Target", "Met?"), rows)
    lines += ["", *what_dominates(pipeline, training, recovery, scale, launch, hand_steps)]
    if pipeline:
        lines += plot_lines("metrics_pipeline", "Ingest and latency")
        lines += ingest_section(pipeline)
        lines += pg_paths_section(pg_paths) if pg_paths else []
        lines += latency_section(pipeline) + profile_section(pipeline)
    if launch:
        lines += launch_section(launch)
        lines += launch_notes(launch, warm_steps=warm is None, hand_steps=hand_steps)
        lines += plot_lines("launch", "Launch latency and throughput")
    if ab:
        lines += ab_section(ab)
    if warm:
        lines += warm_throughput_section(warm)
    if client:
        lines += client_section(client)
    if training:
        lines += training_section(training)
    if recovery:
        lines += recovery_section(recovery) + plot_lines("recovery", "Recovery times")
    if scale:
        lines += scale_section(scale) + plot_lines("scale", "Scale")
    if replicas:
        lines += replicas_section(replicas)
    if sweeps:
        lines += sweeps_section(sweeps)
    lines += design_notes()
    return "\n".join(lines).rstrip() + "\n"


def design_notes() -> list[str]:
    """The hand-kept design notes behind the figures, when the file is there."""
    if not DESIGN_NOTES.exists():
        return []
    return [DESIGN_NOTES.read_text().rstrip(), ""]


def plot_lines(name: str, title: str) -> list[str]:
    """The image `bench.plots` drew for these results, when there is one."""
    if not (DOC.parent / "bench-plots" / f"{name}.png").exists():
        return []
    return [f"![{title}](bench-plots/{name}.png)", ""]


def write() -> Path:
    pipeline, training = _load("metrics_pipeline"), _load("training_overhead")
    DOC.write_text(
        render(
            pipeline,
            training,
            _load("pg_insert_paths"),
            recovery=_load("recovery"),
            scale=_load("scale"),
            launch=_load("launch"),
            warm=_load("warm_throughput"),
            ab={name: found for name, _ in EXPERIMENTS if (found := _load(name)) is not None},
            client=_load("client_mode"),
            replicas=_load("replicas"),
            sweeps=_load("sweeps"),
        )
    )
    return DOC


if __name__ == "__main__":
    print(write())
