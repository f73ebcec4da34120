"""Metric ingest rate and end-to-end latency, against a real `strata server`.

    .venv/bin/python -m bench.metrics_pipeline [--quick] [--profile]

1. Ingest: several runtime channels (/tasks/connect) send `MetricBatch` frames as fast as
   acks come back; points/s = points acknowledged / wall time. On SQLite and PostgreSQL.
2. Latency: the real `MetricSender` (as a training process uses it) gets `put()` calls at a
   steady rate; a job-stream subscriber in another process timestamps every point it
   receives; latency = receive time - the point's wall_time.
3. Fan-out: the same with ten subscribers on the job stream.

Results go to bench/results/metrics_pipeline.json and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import sys
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from agents.protocol import TaskHello
from agents.runtime.sender import MetricSender, task_channel_url
from bench import profiling, report
from bench.harness import (
    RESULTS,
    Conditions,
    Server,
    cpu_seconds,
    machine_busy_seconds,
    machine_info,
    percentile,
    postgres_cluster,
    postgres_database,
    postgres_pids,
    repeat_runs,
    spread,
    strata_server,
    undisturbed,
    write_result,
)

TASKS = ("chief:0", "worker:0", "worker:1", "worker:2")
NAMES = ("loss", "accuracy", "learning_rate", "steps_per_sec")  # cycled over the points
INGEST_TARGET = 50_000  # points/s
LATENCY_TARGET_MS = 250.0  # p99 at LATENCY_TARGET_RATE
LATENCY_TARGET_RATE = 10_000  # points/s


@dataclass(frozen=True)
class Plan:
    ingest_runs: int
    ingest_points_per_task: int
    batch: int
    latency_runs: int
    latency_seconds: float
    rates: tuple[int, ...]
    fanout_subscribers: int
    latency_on_postgres: bool


FULL = Plan(
    ingest_runs=3,
    ingest_points_per_task=100_000,
    batch=5_000,
    latency_runs=3,
    latency_seconds=10.0,
    rates=(1_000, 10_000),
    fanout_subscribers=10,
    latency_on_postgres=True,
)
QUICK = Plan(
    ingest_runs=1,
    ingest_points_per_task=30_000,
    batch=5_000,
    latency_runs=1,
    latency_seconds=5.0,
    rates=(1_000, 10_000),
    fanout_subscribers=10,
    latency_on_postgres=False,
)


# --- CPU accounting shared by both measurements -----------------------------------------------


def _cpu_snapshot(server: Server, extra: tuple[int, ...] = ()) -> dict[str, float]:
    snapshot = {
        "machine": machine_busy_seconds(),
        "server": cpu_seconds(server.process.pid),
        "bench": time.process_time(),  # the load generator, and the sender threads
    }
    for pid in extra:
        snapshot[f"pid:{pid}"] = cpu_seconds(pid)
    if server.database == "postgresql":
        snapshot["postgres"] = sum(cpu_seconds(p) for p in postgres_pids(server.database_url))
    return snapshot


def _cpu_used(
    server: Server, before: dict[str, float], extra: tuple[int, ...] = ()
) -> dict[str, float]:
    after = _cpu_snapshot(server, extra)
    used = {name: round(after[name] - before[name], 2) for name in before}
    # Whatever the machine did beyond our processes: other tenants of the shared cores.
    used["others"] = round(used.pop("machine") - sum(used.values()), 2)
    return used


# --- 1. ingest --------------------------------------------------------------------------------


def build_frames(points: int, batch: int) -> list[str]:
    """Every MetricBatch one channel sends, serialised before the clock starts.

    Sequence numbers start at 0 for every task attempt, so one list serves all channels and
    all runs (each run uses a fresh job). The client's only work while timed is sending.
    """
    frames = []
    for first in range(0, points, batch):
        body = ",".join(
            f'{{"seq":{seq},"name":"{NAMES[seq % len(NAMES)]}","step":{seq // len(NAMES)},'
            f'"value":{1.0 / (1 + seq):.6g},"wall_time":{1.7e9 + seq / 1000:.3f}}}'
            for seq in range(first, min(points, first + batch))
        )
        frames.append(f'{{"type":"metrics","points":[{body}]}}')
    return frames


async def _channel(
    server: Server, token: str, task: str, frames: list[str], start: asyncio.Event
) -> int:
    """One task's runtime channel: hello, then stop-and-wait batches (as MetricSender does).

    The websockets client offers permessage-deflate like the real sender does, so the
    server pays for decompression here as it would in production.
    """
    async with connect(
        task_channel_url(server.url),
        additional_headers={"Authorization": f"Bearer {token}"},
        max_size=1 << 20,
        proxy=None,
    ) as ws:
        await ws.send(TaskHello(task=task, attempt=0).model_dump_json())
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "task_welcome" and welcome["next_seq"] == 0, welcome
        await start.wait()
        acked = -1
        for frame in frames:
            await ws.send(frame)
            reply = json.loads(await ws.recv())
            assert reply["type"] == "ack" and reply["seq"] > acked, reply
            acked = reply["seq"]
        return acked + 1


async def _drive(server: Server, job_id: int, frames: list[str]) -> tuple[float, int, Any]:
    """All channels at once; (seconds, points acknowledged, CPU used)."""
    token = server.task_token(job_id)
    start = asyncio.Event()
    channels = [asyncio.create_task(_channel(server, token, task, frames, start)) for task in TASKS]
    await asyncio.sleep(0.5)  # every channel connected and welcomed
    cpu = _cpu_snapshot(server)
    began = time.perf_counter()
    start.set()
    acked = await asyncio.gather(*channels)
    elapsed = time.perf_counter() - began
    return elapsed, sum(acked), _cpu_used(server, cpu)


def ingest_once(server: Server, frames: list[str], points_per_task: int) -> dict[str, Any]:
    with server.job() as job_id:  # a fresh job: sequence numbers start at 0 again
        elapsed, acked, used = asyncio.run(_drive(server, job_id, frames))
        stored = server.stored_points(job_id)
    expected = points_per_task * len(TASKS)
    assert acked == expected == stored, (acked, expected, stored)
    return {
        "points": expected,
        "seconds": round(elapsed, 3),
        "points_per_s": round(expected / elapsed),
        "cpu_seconds": used,
    }


def measure_ingest(
    server: Server, plan: Plan, conditions: Conditions, profile_dir: Path | None
) -> dict[str, Any]:
    frames = build_frames(plan.ingest_points_per_task, plan.batch)

    def measure(attempt: int) -> dict[str, Any]:
        recorder = None
        if profile_dir is not None and attempt == 0:
            expected_s = plan.ingest_points_per_task * len(TASKS) / INGEST_TARGET
            path = _profile_path(profile_dir, server, "ingest")
            recorder = profiling.start(server.process.pid, max(3.0, expected_s), path)
            time.sleep(0.5)  # let py-spy attach before the load starts
        result = ingest_once(server, frames, plan.ingest_points_per_task)
        profiling.finish(recorder)
        print(f"  ingest {server.database}: {result['points_per_s']:,} points/s")
        return result

    runs = repeat_runs(measure, plan.ingest_runs, conditions)
    summarised = undisturbed(runs)
    return {
        "channels": len(TASKS),
        "batch": plan.batch,
        "points_per_run": plan.ingest_points_per_task * len(TASKS),
        "points_per_s": spread([r["points_per_s"] for r in summarised]),
        "summarised_runs": len(summarised),
        "runs": runs,
    }


# --- 2. latency: the subscriber side (a separate process, as a browser would be) --------------


@dataclass
class _Stream:
    """What one job-stream subscriber has seen."""

    counts: dict[str, int] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)
    latencies: array[float] = field(default_factory=lambda: array("d"))
    arrivals: list[tuple[str, int, float]] = field(default_factory=list)  # per metrics frame
    frames: int = 0
    duplicates: int = 0
    closed: str | None = None
    expected: dict[str, int] | None = None
    complete: asyncio.Event = field(default_factory=asyncio.Event)

    def check(self) -> None:
        if self.closed or (
            self.expected is not None
            and all(self.counts.get(t, 0) >= n for t, n in self.expected.items())
        ):
            self.complete.set()

    def result(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "frames": self.frames,
            "duplicates": self.duplicates,
            "closed": self.closed,
            "latencies": self.latencies,
            "arrivals": self.arrivals,
        }


async def _subscribe(url: str, ready: asyncio.Event, stream: _Stream) -> None:
    async with connect(url, max_size=None, proxy=None) as ws:
        await ws.send('{"type":"subscribe","cursor":null}')
        while json.loads(await ws.recv())["type"] != "history_end":
            pass
        ready.set()
        try:
            while True:
                raw = await ws.recv()
                received = time.time()  # before parsing: the frame is here
                frame = json.loads(raw)
                if frame["type"] == "metrics":
                    _record(stream, frame, received)
        except Exception as exc:  # a close by the server (e.g. 1013, too slow) ends the run
            stream.closed = repr(exc)
            stream.check()


def _record(stream: _Stream, frame: dict[str, Any], received: float) -> None:
    task = frame["task"]
    stream.frames += 1
    if frame["last_seq"] <= stream.last_seq.get(task, -1):
        stream.duplicates += 1
    stream.last_seq[task] = frame["last_seq"]
    stream.arrivals.append((task, frame["last_seq"], received))
    for _steps, _values, wall_times in frame["series"].values():
        stream.counts[task] = stream.counts.get(task, 0) + len(wall_times)
        stream.latencies.extend(received - t for t in wall_times)
    stream.check()


async def _subscribers(url: str, count: int, control: Connection) -> list[_Stream]:
    streams = [_Stream() for _ in range(count)]
    ready = [asyncio.Event() for _ in streams]
    tasks = [asyncio.create_task(_subscribe(url, ready[i], streams[i])) for i in range(count)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 30)
    control.send("ready")
    # The parent sends how many points each task sent once its senders have flushed.
    expected = await asyncio.get_running_loop().run_in_executor(None, control.recv)
    for stream in streams:
        stream.expected = expected
        stream.check()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(s.complete.wait() for s in streams)), 30)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return streams


def subscriber_process(url: str, count: int, control: Connection) -> None:
    """The subscribers' process: its CPU does not compete for the senders' GIL."""
    streams = asyncio.run(_subscribers(url, count, control))
    control.send([s.result() for s in streams])


@contextlib.contextmanager
def _subscribed(server: Server, job_id: int, count: int) -> Iterator[tuple[Connection, int]]:
    url = f"{server.ws_url}/jobs/{job_id}/stream?token={server.admin_token}"
    context = multiprocessing.get_context("spawn")  # no copy of our threads and sockets
    control, child_end = context.Pipe()
    process = context.Process(target=subscriber_process, args=(url, count, child_end))
    process.start()
    try:
        if not control.poll(60) or control.recv() != "ready":
            raise RuntimeError("the job-stream subscribers did not get to history_end")
        assert process.pid is not None
        yield control, process.pid
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()


# --- 2. latency: the training side ------------------------------------------------------------


def _generate(senders: Sequence[MetricSender], rate: int, seconds: float) -> float:
    """put()s at `rate` points/s over the senders, in 10 ms ticks; returns the time taken.

    Each point's wall_time is the moment it is put, as a Keras callback would stamp it.
    """
    tick = 0.01
    total = int(rate * seconds)
    began = time.perf_counter()
    sent = 0
    while sent < total:
        tick_began = time.perf_counter()
        due = min(total, int(rate * (tick_began - began)) + 1)
        while sent < due:
            step, index = divmod(sent, len(senders))
            senders[index].put(NAMES[step % len(NAMES)], 0.5, step, time.time())
            sent += 1
        time.sleep(max(0.0, tick - (time.perf_counter() - tick_began)))
    return time.perf_counter() - began


def _wait_connected(senders: Sequence[MetricSender], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(s.connected for s in senders):
        if time.monotonic() > deadline:
            raise RuntimeError("the metric senders did not connect")
        time.sleep(0.05)


class TimedSender(MetricSender):
    """The real MetricSender, also noting when each batch leaves (by its highest seq).

    Only a timestamp is added, in the step that builds a batch right before it is sent, so
    a point's latency splits into the sender's batching wait and the server's path.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent_at: dict[int, float] = {}  # before the thread starts in __init__
        super().__init__(*args, **kwargs)

    def _take_batch(self) -> tuple[int, str] | None:
        batch = super()._take_batch()
        if batch is not None:
            self.sent_at[batch[0]] = time.time()
        return batch


def _sender_stats(senders: list[TimedSender], flushed: bool) -> dict[str, Any]:
    return {
        "batches": sum(s.batches_sent for s in senders),
        "dropped": sum(s.dropped for s in senders),
        "invalid": sum(s.invalid for s in senders),
        "reconnects": sum(s.connections - 1 for s in senders),
        "flushed": flushed,
    }


def latency_once(
    server: Server, rate: int, seconds: float, subscribers: int, profile: Path | None
) -> dict[str, Any]:
    with server.job() as job_id, _subscribed(server, job_id, subscribers) as (control, pid):
        url, token = task_channel_url(server.url), server.task_token(job_id)
        senders = [TimedSender(url, token, task, 0, exit_flush_timeout=None) for task in TASKS]
        try:
            _wait_connected(senders)
            recorder = profiling.start(server.process.pid, seconds, profile) if profile else None
            cpu = _cpu_snapshot(server, (pid,))
            elapsed = _generate(senders, rate, seconds)
            flushed = all(s.flush(30) for s in senders)
            used = _cpu_used(server, cpu, (pid,))
            profiling.finish(recorder)
            sent = {task: s.next_seq for task, s in zip(TASKS, senders, strict=True)}
            control.send(sent)
            if not control.poll(90):
                raise RuntimeError("the subscriber process sent no results")
            streams: list[dict[str, Any]] = control.recv()
        finally:
            for sender in senders:
                sender.close(timeout=0)
    used["subscribers"] = used.pop(f"pid:{pid}")
    result = _latency_result(sent, elapsed, streams, _sender_stats(senders, flushed), used)
    result["server_path_ms"] = _server_path(senders, streams)
    return result


def _server_path(senders: list[TimedSender], streams: list[dict[str, Any]]) -> dict[str, float]:
    """Per frame: batch sent by the sender → frame received by a subscriber."""
    sent_at = {task: s.sent_at for task, s in zip(TASKS, senders, strict=True)}
    paths = sorted(
        received - sent_at[task][last_seq]
        for stream in streams
        for task, last_seq, received in stream["arrivals"]
        if last_seq in sent_at[task]
    )
    return {
        "p50": round(1000 * percentile(paths, 50), 1),
        "p99": round(1000 * percentile(paths, 99), 1),
        "max": round(1000 * paths[-1], 1) if paths else float("nan"),
    }


def _latency_result(
    sent: dict[str, int],
    elapsed: float,
    streams: list[dict[str, Any]],
    sender_stats: dict[str, Any],
    cpu: dict[str, float],
) -> dict[str, Any]:
    everything = sorted(x for s in streams for x in s["latencies"])
    total_sent = sum(sent.values())
    return {
        "seconds": round(elapsed, 2),
        "achieved_rate": round(total_sent / elapsed),
        "sent": total_sent,
        "received_per_subscriber": [sum(s["counts"].values()) for s in streams],
        # Every subscriber got exactly what every task sent: nothing lost, nothing doubled.
        "all_received": all(s["counts"] == sent for s in streams),
        "duplicate_frames": sum(s["duplicates"] for s in streams),
        "closed": [s["closed"] for s in streams if s["closed"]],
        "latency_ms": {
            "p50": round(1000 * percentile(everything, 50), 1),
            "p99": round(1000 * percentile(everything, 99), 1),
            "max": round(1000 * everything[-1], 1) if everything else None,
        },
        "worst_subscriber_p99_ms": round(
            1000 * max(percentile(sorted(s["latencies"]), 99) for s in streams), 1
        ),
        "sender": sender_stats,
        "cpu_seconds": cpu,
    }


def measure_latency(
    server: Server,
    plan: Plan,
    rate: int,
    subscribers: int,
    conditions: Conditions,
    profile_dir: Path | None,
) -> dict[str, Any]:
    def measure(attempt: int) -> dict[str, Any]:
        profile = None
        if profile_dir is not None and attempt == 0:
            profile = _profile_path(profile_dir, server, f"latency-{rate}-x{subscribers}")
        result = latency_once(server, rate, plan.latency_seconds, subscribers, profile)
        lat = result["latency_ms"]
        print(
            f"  latency {server.database} {rate:,}/s x{subscribers}: "
            f"p50 {lat['p50']} ms, p99 {lat['p99']} ms, max {lat['max']} ms; received "
            f"{min(result['received_per_subscriber']):,}/{result['sent']:,}; "
            f"server path p99 {result['server_path_ms']['p99']} ms"
        )
        return result

    runs = repeat_runs(measure, plan.latency_runs, conditions)
    summarised = undisturbed(runs)
    return {
        "rate": rate,
        "senders": len(TASKS),
        "subscribers": subscribers,
        "seconds_per_run": plan.latency_seconds,
        "p50_ms": spread([r["latency_ms"]["p50"] for r in summarised]),
        "p99_ms": spread([r["latency_ms"]["p99"] for r in summarised]),
        "max_ms": max(r["latency_ms"]["max"] for r in summarised),
        "server_path_p99_ms": spread([r["server_path_ms"]["p99"] for r in summarised]),
        "summarised_runs": len(summarised),
        "sent": sum(r["sent"] for r in runs),
        "all_received": all(r["all_received"] for r in runs),  # disturbed or not
        "runs": runs,
    }


# --- the run ------------------------------------------------------------------------------


def _server_profiles(profile_dir: Path | None) -> list[Path]:
    """This benchmark's sample files (the training benchmark's chief-*.txt are not)."""
    if profile_dir is None:
        return []
    return sorted(p for p in profile_dir.glob("*.txt") if not p.name.startswith("chief-"))


def _profile_path(profile_dir: Path, server: Server, what: str) -> Path:
    return profile_dir / f"{what}-{server.database}.txt"


def run_backend(
    server: Server, plan: Plan, conditions: Conditions, fanout: bool, profile_dir: Path | None
) -> dict[str, Any]:
    result: dict[str, Any] = {"ingest": measure_ingest(server, plan, conditions, profile_dir)}
    if server.database == "sqlite" or plan.latency_on_postgres:
        result["latency"] = [
            measure_latency(server, plan, rate, 1, conditions, profile_dir) for rate in plan.rates
        ]
    if fanout:
        result["fanout"] = measure_latency(
            server, plan, LATENCY_TARGET_RATE, plan.fanout_subscribers, conditions, profile_dir
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run of each (~1 min)")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the server (bench/results/profiles/)"
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    profile_dir = RESULTS / "profiles" if args.profile else None
    for stale in _server_profiles(profile_dir):
        stale.unlink()  # so that the summary below covers this run's samples only
    conditions = Conditions(wait_budget=30.0, extra=1) if args.quick else Conditions()
    began = time.monotonic()

    results: dict[str, Any] = {
        "plan": asdict(plan) | {"quick": args.quick},
        "conditions": conditions.describe(),
        "tasks": TASKS,
    }
    with postgres_cluster() as admin_url:
        results["machine"] = machine_info(admin_url)
        with strata_server() as server:
            results["sqlite"] = run_backend(server, plan, conditions, True, profile_dir)
        with postgres_database(admin_url) as url, strata_server(url) as server:
            results["postgresql"] = run_backend(server, plan, conditions, False, profile_dir)
    results["targets"] = {
        "ingest_points_per_s": INGEST_TARGET,
        "latency_p99_ms": LATENCY_TARGET_MS,
        "latency_rate": LATENCY_TARGET_RATE,
    }
    if profile_dir is not None:
        results["profiles"] = {
            path.stem: profiling.summarize(path) for path in _server_profiles(profile_dir)
        }
    results["machine"]["load_average_at_end"] = os.getloadavg()
    results["wall_seconds"] = round(time.monotonic() - began, 1)
    write_result("metrics_pipeline", results)
    report.write()
    print(f"done in {results['wall_seconds']} s; results in docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
