"""Scale: many simulated agents and thousands of tasks against one server.

    .venv/bin/python -m bench.scale [--quick] [--agents 100 1000] [--databases sqlite postgresql]

For each database and agent count A, a fresh `strata server` (SQLite in its data dir, or a
fresh database on a throwaway PostgreSQL cluster) and A simulated agents: light
clients speaking the real agent protocol over real websockets (`agents.protocol`), spread
over a few processes, each agent declaring 8 simulated GPUs and heartbeating as often as
the server says (every second up to 1,000 agents; past that the server stretches the period,
backend.scheduling.pace) with the tasks it "runs". A start_task is answered with
task_started (a made-up pid) and the task is reported in every heartbeat after; a stop_task
with task_exited. Nothing trains: what is measured is the control plane.

Then A parameter_server jobs of 10 tasks each (1 chief, 8 one-GPU workers, 1 ps), 10 x A tasks
in all (10,000 at 1,000 agents), are submitted at once (8 requests at a time) and timed until
every one is running: the time to place A queued jobs. With all of them running and every agent
heartbeating, the benchmark measures the latency (p50/p99) of `GET /jobs`, `GET /cluster`, `GET
/jobs/{id}` and `POST /jobs` (a job that waits: the cluster is full), the server's CPU (cores)
over 10 s of heartbeats alone, before those requests (after the 10 s in which the controller
confirms the last starts, also measured), and its resident memory after them. Every figure
comes from a run without a profiler; the placement window is sampled with py-spy in a second
run of the same point, which ends once every job runs (its own times are kept beside the
profile: the sampler takes CPU from the same two cores).
Results go to bench/results/scale.json; docs/benchmarks.md renders them with a plot of how each
grows with the agent count, a line per database.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from agents.protocol import (
    Device,
    Heartbeat,
    HeartbeatPeriod,
    Hello,
    RunningTask,
    StartTask,
    StopTask,
    TaskExit,
    TaskExited,
    TaskKey,
    TaskStarted,
    Welcome,
    server_message,
)
from bench import profiling
from bench.harness import (
    RESULTS,
    Server,
    cpu_seconds,
    machine_info,
    measured_on,
    percentile,
    postgres_cluster,
    postgres_database,
    spread,
    strata_server,
    write_result,
)

GPUS_PER_AGENT = 8
AGENT_PROCESSES = 4
SUBMITTERS = 8  # jobs submitted at a time
# py-spy's samples per second of the server while it places, in a run of its own: the sampling
# takes CPU from the same two cores (at 200 a second, every job ran ~2.5 s later at 1,000
# agents than unsampled; at 50, about a second).
PLACING_PROFILE_RATE = 100
JOB: dict[str, Any] = {
    "name": "scale",
    "strategy": "parameter_server",
    "entrypoint": ["python", "train.py"],
    "replicas": {
        "chief": {"count": 1},
        "worker": {"count": 8, "gpus": 1},
        "ps": {"count": 1},
    },
}
WAITING_JOB = {**JOB, "name": "scale-waits"}


# --- simulated agents (in their own processes) ------------------------------------------------


class SimulatedAgent:
    """One agent: hello, heartbeats, and prompt answers to start and stop."""

    def __init__(self, url: str, token: str, index: int) -> None:
        self.url, self.token = url, token
        self.running: dict[TaskKey, int] = {}
        self.period = 1.0  # seconds between heartbeats, as the server says
        self.hello = Hello(
            name=f"sim-{index:05d}",
            identity=f"bench-sim-agent-{index:05d}",
            address=f"10.{index // 250}.{index % 250}.1",
            port_range=(40000, 40999),
            devices=[
                Device(index=i, name="Simulated GPU", simulated=True) for i in range(GPUS_PER_AGENT)
            ],
            version="bench",
        )

    async def run(self, stop: asyncio.Event) -> None:
        from websockets.asyncio.client import connect

        from agents.host.channel import COMPRESSION

        headers = {"Authorization": f"Bearer {self.token}"}
        while not stop.is_set():
            try:
                async with connect(
                    self.url, additional_headers=headers, max_size=None, compression=COMPRESSION
                ) as ws:
                    await self._session(ws)
            except Exception:
                await asyncio.sleep(0.5)  # reconnect, as a real agent would

    async def _session(self, ws: Any) -> None:
        hello = self.hello.model_copy(update={"running": self._running()})
        await ws.send(hello.model_dump_json())
        welcome = server_message.validate_json(await ws.recv())
        if not isinstance(welcome, Welcome):
            raise RuntimeError(f"expected welcome, got {welcome.type}")
        self.period = welcome.heartbeat_seconds
        beat = asyncio.create_task(self._heartbeat(ws, hello.running))
        try:
            async for raw in ws:
                await self._handle(ws, server_message.validate_json(raw))
        finally:
            beat.cancel()

    async def _handle(self, ws: Any, message: object) -> None:
        if isinstance(message, HeartbeatPeriod):
            self.period = message.heartbeat_seconds
        elif isinstance(message, StartTask) and message.key not in self.running:
            pid = self.running[message.key] = 100_000 + len(self.running)
            await ws.send(TaskStarted(key=message.key, pid=pid).model_dump_json())
        elif isinstance(message, StopTask) and self.running.pop(message.key, None) is not None:
            gone = TaskExit(key=message.key, exit_code=-15, signal=15)
            await ws.send(TaskExited(exit=gone).model_dump_json())

    def _running(self) -> list[RunningTask]:
        return [RunningTask(key=key, pid=pid) for key, pid in self.running.items()]

    async def _heartbeat(self, ws: Any, listed: list[RunningTask]) -> None:
        # As a real agent's channel does: an unchanged running list is left out.
        while True:
            await asyncio.sleep(self.period)
            beat = Heartbeat(running=self._running())
            await ws.send(beat.since(listed).model_dump_json())
            listed = beat.running


def agents_process(url: str, token: str, indices: Sequence[int], control: Connection) -> None:
    """A process running many simulated agents until the parent says stop."""

    async def main() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(SimulatedAgent(url, token, i).run(stop)) for i in indices]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, control.recv)  # blocks until "stop"
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


# --- measuring ------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cores_over(pid: int, seconds: float) -> float:
    """The process's CPU (cores) over the next `seconds`."""
    cpu, wall = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu) / (time.monotonic() - wall)


def lock_held(http: httpx.Client) -> dict[str, float]:
    """Seconds the server's controller lock has been held so far, by what held it (pass,
    request, agent), from its /metrics."""
    text = http.get("/metrics").raise_for_status().text
    return {
        sample.labels["by"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "strata_controller_lock_held_seconds"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def passes(http: httpx.Client) -> int:
    """Reconcile passes the server's controller has run so far, from its /metrics."""
    text = http.get("/metrics").raise_for_status().text
    return round(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "strata_reconcile_pass_seconds"
            for sample in family.samples
            if sample.name.endswith("_count")
        )
    )


def wait_online(http: httpx.Client, count: int, timeout: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        online = http.get("/cluster").json()["totals"]["online_hosts"]
        if online >= count:
            return time.monotonic() - began
        time.sleep(0.5)
    raise TimeoutError(f"only {online} of {count} agents online after {timeout}s")


# Where the server's samples fall, by what the stack passes through.
SCALE_STAGES = {
    "GET /jobs": "list_jobs",
    "agent heartbeats": "on_heartbeat",
    "agent channel frames": "agent_channel",
    "controller passes": "reconcile",
    "database (SQLite)": "sqlite3",
}


# Where the server's samples fall with every job running and nothing asked of it.
HEARTBEAT_STAGES = {
    "agent frames read (websocket)": "websockets/",
    "agent frames parsed": "validate_json",
    "agent channel frames": "agent_channel",
    "heartbeat times written": "heartbeat_times.py",
    "controller passes": "reconcile",
    "database (SQLite thread)": "_connection_worker_thread",
}


# Where the server's samples fall while it places jobs and starts their tasks.
PLACING_STAGES = {
    "job submissions (POST /jobs)": "submit_job",
    "placement passes": "pending_jobs.py",
    "task starts reported": "mark_started_many",
    "heartbeat comparisons": "sync_running",
    "agent frames parsed": "validate_json",
    "agent channel frames": "agent_channel",
    "controller passes": "reconcile",
    "database (SQLite thread)": "_connection_worker_thread",
}


GC_PROBE = Path(__file__).parent / "gc_probe"


def full_collections(log: Path, window: list[float]) -> dict[str, Any]:
    """The server's full garbage collections (bench/gc_probe): how long each took, over the
    whole run, and how many fell while GET /jobs was measured."""
    pauses = (
        [
            (float(at), float(ms))
            for at, ms in (line.split() for line in log.read_text().splitlines() if line.strip())
        ]
        if log.exists()
        else []
    )
    if not pauses:
        return {"count": 0}
    during = [ms for at, ms in pauses if window[0] <= at <= window[1]]
    return {
        "count": len(pauses),
        "ms": spread([ms for _, ms in pauses]),
        "during_get_jobs": len(during),
        "get_jobs_seconds": round(window[1] - window[0], 1),
    }


def running_jobs(http: httpx.Client) -> int:
    total: int = http.get("/jobs", params={"status": "running", "limit": 1}).json()["total"]
    return total


def latencies(http: httpx.Client, method: str, path: str, count: int, **kwargs: Any) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        http.request(method, path, **kwargs).raise_for_status()
        times.append((time.perf_counter() - began) * 1000)
    return sorted(times)


def summary(times: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99), "n": len(times)}


DATABASES = ("sqlite", "postgresql")


def measure(
    agents: int,
    requests: int,
    place_timeout: float,
    database_url: str | None = None,
    profiles: Path = RESULTS / "profiles",
    placing_rate: int = PLACING_PROFILE_RATE,
    placing_only: bool = False,
) -> dict[str, Any]:
    """One run: a fresh server on `database_url` (None: SQLite) and `agents` agents; its
    samples and garbage collections are written under `profiles`. `placing_only`: the run
    ends once every job runs (a run to sample the placement window in)."""
    database = "postgresql" if database_url else "sqlite"
    gc_log = profiles / f"scale-{database}-{agents}-gc{'-placing' if placing_only else ''}.txt"
    gc_log.parent.mkdir(parents=True, exist_ok=True)
    gc_log.unlink(missing_ok=True)
    probe = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(GC_PROBE), os.environ.get("PYTHONPATH")])),
        "STRATA_BENCH_GC_LOG": str(gc_log),
    }
    load_at_start = os.getloadavg()[0]  # the machine may be shared: said beside the figures
    provenance = {"measured_on": measured_on()}
    with strata_server(database_url, extra_env=probe) as server:
        try:
            measured = _measure(
                server, agents, requests, place_timeout, profiles, placing_rate, placing_only
            )
            loads = {"load_average": [round(load_at_start, 2), round(os.getloadavg()[0], 2)]}
            result = {"database": database, **measured, **loads, **provenance}
            if "failed" not in result and not placing_only:
                result["full_collections"] = full_collections(gc_log, result.pop("_window"))
            return result
        except (TimeoutError, httpx.TimeoutException) as exc:
            # Recorded, not raised: the page says where the control plane stopped keeping up
            # (all jobs not running in time, or one request not answered in 120 s).
            print(f"  {database}, {agents} agents: {exc}", flush=True)
            return {
                "database": database,
                "agents": agents,
                "tasks": 10 * agents,
                "failed": str(exc) or type(exc).__name__,
                "load_average": [round(load_at_start, 2), round(os.getloadavg()[0], 2)],
                **provenance,
            }


def _measure(
    server: Server,
    agents: int,
    requests: int,
    place_timeout: float,
    profiles: Path,
    placing_rate: int,
    placing_only: bool = False,
) -> dict[str, Any]:
    url = server.ws_url + "/agents/connect"
    groups = [list(range(agents))[i::AGENT_PROCESSES] for i in range(AGENT_PROCESSES)]
    controls, processes = [], []
    context = multiprocessing.get_context("spawn")
    for indices in groups:
        parent, child = context.Pipe()
        process = context.Process(
            target=agents_process, args=(url, server.agent_token, indices, child), daemon=True
        )
        process.start()
        controls.append(parent)
        processes.append(process)
    http = httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {server.admin_token}"},
        timeout=120,
    )
    try:
        joined = wait_online(http, agents, timeout=120 + agents / 5)
        print(f"  {agents} agents online in {joined:.1f}s", flush=True)

        # Sampled from the first submission until every job runs: what placing and starting
        # costs the server, stage by stage.
        placing = profiles / f"scale-{server.database}-{agents}-placing.txt"
        recorder = (
            profiling.start(server.process.pid, place_timeout, placing, rate=placing_rate)
            if placing_rate
            else None
        )
        held_before, passes_before = lock_held(http), passes(http)
        cpu_before = cpu_seconds(server.process.pid)
        try:
            submitted, placed = _submit_and_wait(http, agents, place_timeout)
        finally:
            profiling.stop(recorder)
        # The server's own CPU over the window: steadier than its length on a shared machine.
        placing_cpu = cpu_seconds(server.process.pid) - cpu_before
        held = {by: round(s - held_before.get(by, 0.0), 2) for by, s in lock_held(http).items()}
        placing_passes = passes(http) - passes_before
        placing_profile = (
            profiling.summarize(placing, PLACING_STAGES, top=8) if recorder is not None else None
        )
        print(f"  placing: {json.dumps(placing_profile)}", flush=True)
        print(
            f"  {agents} jobs ({10 * agents} tasks) submitted in {submitted:.1f}s, all running "
            f"after {placed:.1f}s",
            flush=True,
        )
        if placing_only:
            return {
                "agents": agents,
                "submit_seconds": round(submitted, 2),
                "place_and_start_seconds": round(placed, 2),
                "placing_profile": placing_profile,
                "placing_lock_held_seconds": held,
                "placing_server_cpu_seconds": round(placing_cpu, 2),
                "placing_passes": placing_passes,
                "_window": [],
            }

        pid = server.process.pid
        # First the controller confirms the last starts: a host sent a start is compared
        # with what it runs once its resend time (5 s) has passed, then it is settled. Then
        # heartbeats alone.
        settling_cores = cores_over(pid, 10)
        heartbeat_cores = cores_over(pid, 10)
        # Then sampled, apart from the window above so that py-spy's pauses do not count.
        beats = profiles / f"scale-{server.database}-{agents}-heartbeats.txt"
        profiling.finish(profiling.start(pid, 5.0, beats))
        # Sampled while GET /jobs is measured: what the server spends its time on under this
        # many agents (heartbeats and requests share one event loop).
        profile = profiles / f"scale-{server.database}-{agents}-get-jobs.txt"
        recorder = profiling.start(pid, max(3.0, requests * 0.05), profile)
        window = [time.time()]
        get_jobs = latencies(http, "GET", "/jobs", requests)
        window.append(time.time())
        profiling.finish(recorder)
        get_cluster = latencies(http, "GET", "/cluster", max(5, requests // 4))
        ids = [job["id"] for job in http.get("/jobs", params={"limit": 50}).json()["items"]]
        get_job = [
            latency
            for n in range(requests)
            for latency in latencies(http, "GET", f"/jobs/{ids[n % len(ids)]}", 1)
        ]
        post_jobs = latencies(http, "POST", "/jobs", requests, json=WAITING_JOB)
        result = {
            "agents": agents,
            "tasks": 10 * agents,
            "agents_online_seconds": round(joined, 2),
            "submit_seconds": round(submitted, 2),
            "place_and_start_seconds": round(placed, 2),
            "get_jobs": summary(get_jobs),
            "get_cluster": summary(get_cluster),
            "get_job": summary(sorted(get_job)),
            "post_jobs": summary(post_jobs),
            "server_cores_settling": round(settling_cores, 2),
            "server_cores_heartbeats_only": round(heartbeat_cores, 2),
            "server_rss_mib": round(rss_mib(pid), 1),
            "heartbeats_profile": profiling.summarize(beats, HEARTBEAT_STAGES, top=8),
            "get_jobs_profile": profiling.summarize(profile, SCALE_STAGES, top=8),
            "placing_profile": placing_profile,
            "placing_lock_held_seconds": held,
            "placing_server_cpu_seconds": round(placing_cpu, 2),
            "placing_passes": placing_passes,
            "placing_profile_rate": placing_rate,
            "_window": window,
        }
        print(f"  {json.dumps(result)}", flush=True)
        return result
    finally:
        http.close()
        for control in controls:
            control.send("stop")
        for process in processes:
            process.join(timeout=20)
            if process.is_alive():
                process.kill()


def _submit_and_wait(http: httpx.Client, agents: int, timeout: float) -> tuple[float, float]:
    """Submits one job per agent, SUBMITTERS at a time, as a burst from several clients (or
    a script's thread pool) would; returns (seconds to submit, seconds until all run)."""
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(SUBMITTERS) as pool:
        for response in pool.map(lambda _: http.post("/jobs", json=JOB), range(agents)):
            response.raise_for_status()
    submitted = time.monotonic() - began
    last_report = began
    while (running := running_jobs(http)) < agents:
        now = time.monotonic()
        if now - began > timeout:
            raise TimeoutError(
                f"only {running} of {agents} jobs running after {timeout:.0f} s (submitting "
                f"them took {submitted:.0f} s)"
            )
        if now - last_report > 15:
            last_report = now
            counts = {
                status: http.get("/jobs", params={"status": status, "limit": 1}).json()["total"]
                for status in ("pending", "scheduled", "running", "restarting", "failed")
            }
            print(f"  {now - began:.0f}s: {counts}", flush=True)
        time.sleep(0.5)
    return submitted, time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="25 and 100 agents only, fewer requests"
    )
    parser.add_argument("--agents", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--databases", nargs="+", choices=DATABASES, default=list(DATABASES))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--place-timeout", type=float, default=600, help="seconds for all jobs to run"
    )
    parser.add_argument(
        "--placing-profile-rate",
        type=int,
        default=PLACING_PROFILE_RATE,
        help="py-spy samples/s in a second run that samples the placement (0: no such run)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the runs already in scale.json that this one does not measure again",
    )
    args = parser.parse_args(argv)
    # Two counts even when quick: the plot is about how each figure grows with the count.
    counts = [25, 100] if args.quick else args.agents
    requests = 50 if args.quick else args.requests
    results: dict[str, Any] = {"machine": machine_info(), "gpus_per_agent": GPUS_PER_AGENT}
    results["runs"] = []
    if args.keep and (RESULTS / "scale.json").exists():
        again = {(database, count) for database in args.databases for count in counts}
        earlier = json.loads((RESULTS / "scale.json").read_text())
        results["runs"] = [r for r in earlier["runs"] if (r["database"], r["agents"]) not in again]
        if "note" in earlier:  # written by hand about the runs kept: kept with them
            results["note"] = earlier["note"]
    for database in args.databases:
        with contextlib.ExitStack() as stack:
            admin_url = (
                stack.enter_context(postgres_cluster()) if database == "postgresql" else None
            )
            for count in counts:
                print(f"{database}: {count} simulated agents", flush=True)
                url = stack.enter_context(postgres_database(admin_url)) if admin_url else None
                # Every figure from a run without a sampler: py-spy's own work took CPU from
                # the same two cores, and every job ran a second or so later with it.
                run = measure(count, requests, args.place_timeout, url, placing_rate=0)
                if args.placing_profile_rate and "failed" not in run:
                    print(
                        f"{database}: {count} agents again, py-spy sampling the placement",
                        flush=True,
                    )
                    url = stack.enter_context(postgres_database(admin_url)) if admin_url else None
                    sampled = measure(
                        count,
                        requests,
                        args.place_timeout,
                        url,
                        placing_rate=args.placing_profile_rate,
                        placing_only=True,
                    )
                    run["placing_profile_rate"] = args.placing_profile_rate
                    if "failed" in sampled:
                        run["sampled_run"] = {"failed": sampled["failed"]}
                    else:
                        run["placing_profile"] = sampled["placing_profile"]
                        run["sampled_run"] = {
                            key: sampled[key]
                            for key in (
                                "submit_seconds",
                                "place_and_start_seconds",
                                "placing_lock_held_seconds",
                                "placing_passes",
                            )
                        }
                results["runs"].append(run)
    results["runs"].sort(key=lambda run: (DATABASES.index(run["database"]), run["agents"]))
    write_result("scale", results)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
