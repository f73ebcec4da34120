"""Recovery times: kill a part of a running parameter_server job, time until it trains again.

    .venv/bin/python -m bench.recovery [--quick]

A local cluster (`strata server` and two `strata agent` processes, plus a third agent that can
be lost) runs the
digits example under parameter_server (1 chief, 2 workers, 1 ps; restart policy on_failure,
no backoff). Once the chief reports steady batch progress, one part is killed and the clock
runs until training is seen going again, read from the job's own stream (metric points carry
the wall time at which the runtime observed them, on this same machine):

* worker: SIGKILL worker:1. The coordinator carries on with worker:0, and Strata restarts
  worker:1 alone; resumed = the wall time of `worker:1/resumed` after the kill: the chief's
  runtime stamps it with the moment the first closure that worker:1 finished after its return
  ended (not with its once-a-second poll), for cold and warm starts alike.
* ps: SIGKILL ps:0. Strata restarts ps:0 and the chief, which restores its last backup;
  resumed = the first `batch/*` point of the new chief attempt.
* chief: SIGKILL chief:0; resumed as for ps.
* host: SIGKILL the agent on the third host (its tasks die with it). After the heartbeat
  timeout (4 s here) the host is lost and the job is placed again on the other two;
  resumed = the first `batch/*` point of the new chief attempt.
* drain: `POST /hosts/{name}/drain` of the third host (an interruption, not a failure): the
  chief is asked for a checkpoint at its next step, then what ran there moves to the other
  two (under parameter_server its workers there and the chief; the whole job if its ps or
  only its chief was there); resumed = the first `batch/*` point of the new chief attempt.
* server: SIGKILL `strata server` and start it again at once. The job should not notice:
  its tasks keep training (no attempt changes) and the runtime holds its points until the
  server is back. Measured: kill → healthy again, kill → the first point observed after the
  restart on the job's stream (live again), and how many points were made during the
  outage and delivered afterwards.

Every scenario but the server's runs twice per run, side by side: cold (the job's
`warm_start: false`: each restarted task is a fresh interpreter) and warm (the agents keep
two warm processes each, TensorFlow already imported; before the kill the benchmark waits
until every agent has refilled its pool, as a host at rest would have). The warm runs say
whether the restarted task did start warm (its event).

The floor for a restarted process is TensorFlow's import time, measured on its own. Beside
these, checkpoint now: `POST /jobs/{id}/checkpoint` on the running job, several times, and the
seconds from request to the runtime's report that the checkpoint is written (the answer's
`seconds`, and the request's own round trip). Results go to bench/results/recovery.json
(docs/benchmarks.md renders them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, machine_info, spread, write_result
from tests.support.cluster import (
    Cluster,
    SplitCluster,
    split_cluster,
    stream_frames,
    wait_no_processes,
)

PYTHON = sys.executable
VICTIM = "victim"
SCENARIOS = ("worker", "ps", "chief", "host", "drain", "server")

# Looks through the frames seen so far; the wall time of what it looks for, once it is there.
Finder = Callable[[list[dict[str, Any]]], float | None]
# The extra agent a host-loss scenario kills: its name and its process.
Victim = tuple[str, "subprocess.Popen[bytes]"]


WARM_POOL = 2  # warm processes per agent (STRATA_AGENT_WARM_POOL)
IDLE = re.compile(r"warm process \d+ (?:ready|taken) \((\d+) idle")
MODES = ("cold", "warm")


def job_spec(name: str, warm: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "warm_start": warm,
        "strategy": "parameter_server",
        # Far more than a run needs (it is cancelled after): a warm run first waits for the
        # pools' refills, which wait while the job keeps the CPUs busy.
        "entrypoint": ["python", "examples/digits.py", "--epochs", "5000"],
        "replicas": {
            "chief": {"count": 1},
            "worker": {"count": 2, "gpus": 1},
            "ps": {"count": 1},
        },
        "checkpoint": {"every_epochs": 2},
        "restart": {"policy": "on_failure", "max_restarts": 5, "backoff_seconds": 0},
    }


def tensorflow_import_seconds(repeats: int) -> dict[str, float]:
    """The floor: a fresh process importing TensorFlow, nothing else."""
    times = []
    for _ in range(repeats):
        began = time.monotonic()
        subprocess.run(
            [PYTHON, "-c", "import tensorflow"],
            check=True,
            capture_output=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        times.append(time.monotonic() - began)
    return spread(times)


class Watch:
    """The job's stream in a thread, from history on; `until(predicate)` waits on it."""

    def __init__(self, cluster: Cluster, job_id: int) -> None:
        self.frames: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(cluster, job_id), daemon=True, name="bench-stream"
        )
        self._thread.start()

    def _run(self, cluster: Cluster, job_id: int) -> None:
        def keep(frame: dict[str, Any]) -> bool:
            with self._changed:
                self.frames.append(frame)
                self._changed.notify_all()
            return self._done.is_set()

        # It ends when the job is cancelled or the cluster stops: either way, done watching.
        with contextlib.suppress(Exception):
            stream_frames(cluster, job_id, stop=keep, timeout=900)

    def until(
        self, predicate: Callable[[list[dict[str, Any]]], float | None], timeout: float
    ) -> float:
        deadline = time.monotonic() + timeout
        with self._changed:
            while (found := predicate(self.frames)) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the job did not get there in time")
                self._changed.wait(min(remaining, 1.0))
        return found

    def close(self) -> None:
        self._done.set()


def points(frames: list[dict[str, Any]], task: str) -> list[tuple[int, dict[str, Any]]]:
    """(attempt, {name, step, value, wall_time}) for every metric point of a task so far."""
    found = []
    for frame in frames:
        if frame["type"] != "metrics" or frame["task"] != task:
            continue
        for name, (steps, values, wall_times) in frame["series"].items():
            for step, value, wall_time in zip(steps, values, wall_times, strict=True):
                point = {"name": name, "step": step, "value": value, "wall_time": wall_time}
                found.append((frame["attempt"], point))
    return found


def first_batch_point(
    attempt_at_least: int, after: float
) -> Callable[[list[dict[str, Any]]], float | None]:
    def find(frames: list[dict[str, Any]]) -> float | None:
        for attempt, point in points(frames, "chief:0"):
            if (
                attempt >= attempt_at_least
                and point["name"].startswith("batch/")
                and point["wall_time"] > after
            ):
                return float(point["wall_time"])
        return None

    return find


def worker_back(killed_at: float) -> Finder:
    """When worker:1 finished its first closure after coming back (see the docstring)."""

    def find(frames: list[dict[str, Any]]) -> float | None:
        for _, point in points(frames, "chief:0"):
            if point["name"] == "worker:1/resumed" and point["wall_time"] > killed_at:
                return float(point["wall_time"])
        return None

    return find


def idle_warm_processes(log: Path) -> int:
    """How many warm processes an agent last said it had idle (in its log)."""
    counts = IDLE.findall(log.read_text(errors="replace")) if log.exists() else []
    return int(counts[-1]) if counts else 0


def wait_pools_full(cluster: Cluster, hosts: list[str], timeout: float = 300) -> None:
    """Until every agent named has its whole warm pool idle (a host at rest)."""
    deadline = time.monotonic() + timeout
    while any(
        idle_warm_processes(cluster.data_dir / f"agent-{host}.log") < WARM_POOL for host in hosts
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"warm pools not refilled: {hosts}")
        time.sleep(0.5)


def warm_process_pids() -> list[int]:
    """Every `python -m agents.host.warm` on the machine (all idle while no job runs)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if b"agents.host.warm" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def idle_pool_cost(seconds: float = 10.0) -> dict[str, Any]:
    """CPU and memory of idle warm processes: CPU over `seconds`, resident and proportional
    (shared pages split among their users) memory of each."""
    from agents.host.procfs import cpu_seconds, rss_bytes

    pids = warm_process_pids()
    before = {pid: cpu_seconds(pid) or 0.0 for pid in pids}
    time.sleep(seconds)
    used = sum((cpu_seconds(pid) or 0.0) - before[pid] for pid in pids)
    rss = [rss_bytes(pid) or 0 for pid in pids]
    pss = [proportional_bytes(pid) for pid in pids]
    return {
        "processes": len(pids),
        "cpu_cores": round(used / seconds, 4),
        "rss_mib": spread([r / 2**20 for r in rss]) if rss else None,
        "pss_mib": spread([p / 2**20 for p in pss]) if pss else None,
    }


def proportional_bytes(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def online_hosts(cluster: Cluster) -> list[str]:
    return [h["name"] for h in cluster.http.get("/hosts").json() if h["status"] == "online"]


@contextlib.contextmanager
def training_job(
    cluster: Cluster, name: str, batch_points: int, warm: bool = False
) -> Iterator[tuple[int, Watch]]:
    """A PS job watched on its stream from the moment the chief has reported `batch_points`
    batch points (steady training); cancelled, with every process gone, afterwards."""
    job_id: int = cluster.submit(job_spec(name, warm))["id"]
    watch = Watch(cluster, job_id)
    try:
        watch.until(
            lambda frames: (
                1.0
                if sum(1 for _, p in points(frames, "chief:0") if p["name"].startswith("batch/"))
                >= batch_points
                else None
            ),
            timeout=300,
        )
        yield job_id, watch
    finally:
        watch.close()
        cluster.http.post(f"/jobs/{job_id}/cancel")
        wait_no_processes(job_id, server=cluster.url, timeout=60)


def checkpoint_now(cluster: Cluster, requests: int) -> dict[str, Any]:
    """Checkpoint-now on a running job, `requests` times, a second apart."""
    with training_job(cluster, "checkpoint-now", batch_points=1) as (job_id, _):
        written, round_trips = [], []
        for _ in range(requests):
            began = time.monotonic()
            answer = cluster.http.post(f"/jobs/{job_id}/checkpoint", timeout=60)
            round_trips.append(time.monotonic() - began)
            answer.raise_for_status()
            written.append(answer.json()["seconds"])
            time.sleep(1.0)
    print(f"  checkpoint now: written after {[round(w, 2) for w in written]} s", flush=True)
    return {
        "requests": requests,
        "written_seconds": written,
        "seconds": spread(written),
        "round_trip_seconds": spread(round_trips),
    }


def task_pid(cluster: Cluster, job_id: int, name: str) -> int:
    task = next(t for t in cluster.job(job_id)["tasks"] if t["name"] == name)
    return int(task["pid"])


def kill_and_time(
    cluster: Cluster, scenario: str, job_id: int, watch: Watch, victim: Victim | None
) -> float:
    """Kill what the scenario names; seconds until the stream shows training again."""
    placed = cluster.job(job_id)
    killed_at = time.time()
    if scenario == "worker":
        os.kill(task_pid(cluster, job_id, "worker:1"), signal.SIGKILL)
        return watch.until(worker_back(killed_at), timeout=180) - killed_at
    if scenario in ("ps", "chief"):
        os.kill(
            task_pid(cluster, job_id, "ps:0" if scenario == "ps" else "chief:0"), signal.SIGKILL
        )
        return watch.until(first_batch_point(1, killed_at), timeout=180) - killed_at
    assert victim is not None
    name, process = victim
    hosts = {t["host"] for t in placed["tasks"]}
    assert name in hosts, f"nothing of the job on {name}: {hosts}"
    if scenario == "drain":
        cluster.http.post(f"/hosts/{name}/drain").raise_for_status()
        return watch.until(first_batch_point(1, killed_at), timeout=240) - killed_at
    process.send_signal(signal.SIGKILL)
    process.wait()
    return watch.until(first_batch_point(1, killed_at), timeout=240) - killed_at


def restart_server(cluster: SplitCluster, job_id: int, watch: Watch) -> dict[str, Any]:
    """Kill the server under a running job and start it again; what the job went through."""
    before = {t["name"]: t["attempt"] for t in cluster.job(job_id)["tasks"]}
    watch.close()  # its stream dies with the server
    killed_at = time.time()
    cluster.kill_server()
    cluster.start_server()  # returns once /healthz answers
    healthy_at = time.time()
    again = Watch(cluster, job_id)
    try:
        live_at = again.until(first_batch_point(before["chief:0"], healthy_at), timeout=120)
        during = [
            p
            for attempt, p in points(again.frames, "chief:0")
            if attempt == before["chief:0"] and killed_at < p["wall_time"] < healthy_at
        ]
    finally:
        again.close()
    after = {t["name"]: t["attempt"] for t in cluster.job(job_id)["tasks"]}
    if after != before:
        raise RuntimeError(f"a server restart restarted tasks: {before} -> {after}")
    return {
        "seconds": round(live_at - killed_at, 2),
        "outage_seconds": round(healthy_at - killed_at, 2),
        "points_made_during_outage": len(during),
    }


KILLED_TASK = {"worker": "worker:1", "ps": "ps:0", "chief": "chief:0"}


def restart_phases(
    cluster: Cluster, job_id: int, task: str, killed_at: float
) -> dict[str, float | bool]:
    """Where a recovery's time went, from the job's events (stamped by the server on this
    machine): kill → the exit (or the host's loss) recorded, → the new attempt's process
    reported started. The rest, to training again, is the new process's: Python and
    TensorFlow imports, joining the cluster, and for a worker the coordinator re-adding it."""
    phases: dict[str, float | bool] = {}
    for event in cluster.events(job_id):
        at = datetime.fromisoformat(event["at"]).timestamp()
        if event["kind"] != "task_status" or event["task"] != task or at < killed_at:
            continue
        to = event["data"].get("to")
        if to != "running" and "exit_recorded_s" not in phases:
            phases["exit_recorded_s"] = round(at - killed_at, 2)
        elif to == "running" and "restarted_s" not in phases:
            phases["restarted_s"] = round(at - killed_at, 2)
            phases["started_warm"] = bool(event["data"].get("warm"))
    return phases


# TensorFlow's own log line when a task's gRPC server is up; its prefix carries the wall time
# (absl's format: I<MMDD> <HH:MM:SS.us, or seconds since the epoch here> <thread> <file>]).
SERVER_STARTED = re.compile(r"^I\d{4} \d\d:\d\d:(\d+\.\d+) +\d+ grpc_server_lib\.cc:\d+\] Started")


def listening_after(cluster: Cluster, job_id: int, task: str, killed_at: float) -> float | None:
    """Seconds from the kill until the new attempt's server listened (its own log says)."""
    for line in cluster.logs(job_id, task):
        if (found := SERVER_STARTED.match(line)) and float(found[1]) > killed_at:
            return round(float(found[1]) - killed_at, 2)
    return None


def run_once(cluster: SplitCluster, scenario: str, run: int, mode: str = "cold") -> dict[str, Any]:
    if scenario == "server":
        with training_job(cluster, f"recovery-server-{run}", batch_points=5) as (job_id, watch):
            found = restart_server(cluster, job_id, watch)
            after = cluster.job(job_id)
        print(
            f"  server run {run}: healthy {found['outage_seconds']:.2f}s and live again "
            f"{found['seconds']:.2f}s after the kill; {found['points_made_during_outage']} "
            "points made meanwhile were delivered",
            flush=True,
        )
        return {
            "scenario": scenario,
            **found,
            "restart_count": after["restart_count"],
            "attempts": {t["name"]: t["attempt"] for t in after["tasks"]},
        }
    victim: Victim | None = None
    if scenario in ("host", "drain"):
        name = f"{VICTIM}-{scenario}-{mode}-{run}"
        victim = (
            name,
            cluster.start_agent(name, gpus=4, ports=f"{28000 + 100 * run}-{28099 + 100 * run}"),
        )
        cluster.wait_host(name, "online")
    warm = mode == "warm"
    with training_job(cluster, f"recovery-{scenario}-{mode}-{run}", batch_points=5, warm=warm) as (
        job_id,
        watch,
    ):
        if warm:  # the first starts took warm processes: the host at rest has them back
            wait_pools_full(cluster, online_hosts(cluster))
        killed_at = time.time()
        seconds = kill_and_time(cluster, scenario, job_id, watch, victim)
        after = cluster.job(job_id)
        phases = restart_phases(cluster, job_id, KILLED_TASK.get(scenario, "chief:0"), killed_at)
        if scenario in ("worker", "ps"):
            listening = listening_after(cluster, job_id, KILLED_TASK[scenario], killed_at)
            if listening is not None:
                phases["listening_s"] = listening
    if scenario == "drain" and victim is not None:  # drained: its agent may go
        victim[1].send_signal(signal.SIGTERM)
        victim[1].wait(timeout=60)
    print(
        f"  {scenario} {mode} run {run}: training resumed {seconds:.2f}s after the kill ({phases})",
        flush=True,
    )
    return {
        "scenario": scenario,
        "mode": mode,
        "seconds": round(seconds, 2),
        **phases,
        "restart_count": after["restart_count"],
        "attempts": {t["name"]: t["attempt"] for t in after["tasks"]},
    }


def summarise(found: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "runs": found,
        "seconds": spread([r["seconds"] for r in found]),
        # Scenarios left out of a later `--only` run keep this: the report says which is older.
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    for phase in ("exit_recorded_s", "restarted_s", "listening_s"):
        if found and all(phase in r for r in found):
            summary[phase] = spread([r[phase] for r in found])
    if found and all("started_warm" in r for r in found):
        summary["started_warm"] = sum(1 for r in found if r["started_warm"])
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per scenario")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=SCENARIOS, action="append")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    scenarios = args.only or list(SCENARIOS)

    # Every agent keeps WARM_POOL warm processes; cold runs ask for cold starts instead.
    os.environ["STRATA_AGENT_WARM_POOL"] = str(WARM_POOL)
    floor = tensorflow_import_seconds(3)
    print(f"TensorFlow import: median {floor['median']:.2f}s", flush=True)
    results: dict[str, Any] = {"machine": machine_info(), "tensorflow_import_seconds": floor}
    measured: dict[str, list[dict[str, Any]]] = {}
    measured_warm: dict[str, list[dict[str, Any]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="strata-recovery-") as tmp,
        split_cluster(Path(tmp) / "data") as cluster,
    ):
        wait_pools_full(cluster, online_hosts(cluster))
        results["warm_pool_idle"] = idle_pool_cost()
        print(f"idle warm pool: {results['warm_pool_idle']}", flush=True)
        results["checkpoint_now"] = checkpoint_now(cluster, 3 if args.quick else 8)
        for scenario in scenarios:
            for run in range(runs):
                # Cold and warm alternate, so that drift on the machine favours neither.
                for mode in MODES if scenario != "server" else ("cold",):
                    found = run_once(cluster, scenario, run, mode)
                    into = measured_warm if mode == "warm" else measured
                    into.setdefault(scenario, []).append(found)
    previous = RESULTS / "recovery.json"
    for key, runs_of in (("scenarios", measured), ("warm_scenarios", measured_warm)):
        if args.only and previous.exists():
            # Scenarios not run this time keep their last results.
            results[key] = json.loads(previous.read_text()).get(key, {})
        else:
            results[key] = {}
        results[key].update({name: summarise(found) for name, found in runs_of.items()})
    results["warm_pool_per_agent"] = WARM_POOL
    results["runs_per_scenario"] = runs
    write_result("recovery", results)
    for key in ("scenarios", "warm_scenarios"):
        for name, summary in results[key].items():
            s = summary["seconds"]
            print(f"{name} ({key}): median {s['median']:.2f}s [{s['min']:.2f} to {s['max']:.2f}]")
    print(f"worker target (TF import + 1 s): {floor['median'] + 1:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
