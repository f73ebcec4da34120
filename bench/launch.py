"""Launch latency and training throughput: Strata against starting the processes by hand.

    .venv/bin/python -m bench.launch [--quick] [--runs N] [--no-ray]

The digits example (examples/digits.py) as two jobs: parameter_server (1 chief, 2 workers,
1 ps) and multi_worker_mirrored (2 workers), each started several ways, in one run, in an
order that rotates from run to run:

* strata: `POST /jobs` to a running local cluster (`strata up`, 2 agents x 2 simulated GPUs),
  streaming on (the job's own callbacks: metrics, backups). No periodic checkpoints: the hand
  variant writes none either.
  Its tasks start cold (the job's `warm_start: false`): a fresh interpreter each.
* strata_warm: the same job with warm starts: the agents keep warm processes (TensorFlow
  already imported, STRATA_AGENT_WARM_POOL=2 each) and every task takes one. Before every
  run of any variant the benchmark waits until the pools are full again, so that their
  refills (TensorFlow imports) never overlap a measured run.
* strata_bare: the same as strata, but the example leaves `runtime.callbacks()` out
  (`--without-runtime-callbacks`): what running under Strata costs without the runtime
  library in the training process, which splits the gap to the hand-started processes in two.
* hand: a shell script that starts the same processes with hand-written TF_CONFIG and the
  plain tf_keras callbacks (runtime.callbacks() is [] outside Strata), which is what one types
  without a control plane.
* ray (multi_worker_mirrored only): Ray Train's TensorflowTrainer running the same model,
  data and batch (bench/ray_peer.py; `pip install .[bench]` brings ray).

Both Strata and the script run the example unchanged, which prints the wall time of its first
training step and of every epoch end on the lead task (chief:0, or worker:0): launch latency
is the time from the request (the POST, the script's start) to that first step, and steps/s
is read between the first and the last epoch end (the first epoch also traces the graph).
Over that same window the CPU time of every task, of the control plane (server and agents)
and of the whole machine is sampled (bench/cpu_sampler.py) and reported per training step:
on this small machine training keeps the cores busy, so steps/s follow the CPU each step
costs, and the per-task figures say where a variant's extra cost went. After the counted
runs, one more run of each job under Strata and by hand is sampled with py-spy in every task
that runs the script. The floor is TensorFlow's import time in a fresh process, measured
alone. Results go to bench/results/launch.json; docs/benchmarks.md renders them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import profiling
from bench.cpu_sampler import MACHINE, CpuSampler
from bench.harness import (
    REPO,
    RESULTS,
    cpu_seconds,
    machine_busy_seconds,
    machine_info,
    spread,
    write_result,
)
from bench.recovery import (
    WARM_POOL,
    idle_warm_processes,
    tensorflow_import_seconds,
    warm_process_pids,
)
from bench.run_delay import run_delay_seconds
from tests.support.cluster import Cluster, local_cluster, wait_no_processes
from tests.support.postgres import free_port

PYTHON = sys.executable
STRATEGIES = ("parameter_server", "multi_worker_mirrored")
FIRST_STEP = re.compile(r"strata-example: first step at wall_time=([0-9.]+)")
SERVER, AGENTS = "server", "agents"  # the control plane's processes, in CPU samples
REFILLS = "refills"  # warm processes importing beside a warm run (part of the machine's rest)
REST = "rest"  # the machine's CPU less every named part, run by run (summaries only)
TASK_PROFILE_RATE = 100  # samples/s per task: two tasks may be sampled at once
EPOCH_END = re.compile(r"^epoch=(\d+) loss=\S+ accuracy=\S+ wall_time=([0-9.]+)")


@dataclass(frozen=True)
class Plan:
    runs: int
    epochs: int
    steps_per_epoch: int
    batch: int = 64
    import_repeats: int = 3


FULL = Plan(runs=5, epochs=12, steps_per_epoch=40)
# 9 epochs: the steps/s window (8 x 30 steps, ~5 s) is long enough that one burst of other
# work on a shared machine does not decide a run.
QUICK = Plan(runs=2, epochs=9, steps_per_epoch=30, import_repeats=2)
READY = re.compile(r"warm process (\d+) ready")


@dataclass
class Run:
    launch_s: float  # request → first training step on the lead task
    steps_per_s: float  # lead task, first epoch end → last epoch end
    # Strata only: request → the last of the job's processes reported started (the control
    # plane's part of the launch: placement, the agents' spawn); the rest is TensorFlow's.
    spawned_s: float | None = None
    # Cores the whole machine kept busy from request to finish, and (Strata) how many of them
    # the control plane took: the server and both agents, not the training processes.
    machine_cores: float | None = None
    control_plane_cores: float | None = None
    # CPU milliseconds per training step in the steps/s window, by task ("chief:0", ...), for
    # the control plane (Strata) and for the whole machine: where the cores went.
    cpu_ms_per_step: dict[str, float] | None = None
    # Strata with warm starts: the warm processes refilling the pools a second after the job's
    # tasks started, by the scheduling policy of their main thread ("idle": SCHED_IDLE, as
    # they should import, taking only CPU that nothing else wants; "normal").
    refills: dict[str, int] | None = None
    # Milliseconds per training step each task's threads waited for a CPU while runnable
    # (bench/run_delay.py), where the run sampled it.
    run_delay_ms_per_step: dict[str, float] | None = None


def tasks_of(strategy: str) -> list[tuple[str, int]]:
    if strategy == "parameter_server":
        return [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    return [("worker", 0), ("worker", 1)]


def script_tasks(strategy: str) -> list[str]:
    """The tasks that run the training script: under parameter_server the workers and the ps
    are TensorFlow servers that run no Python while training (py-spy sees nothing there)."""
    if strategy == "parameter_server":
        return ["chief:0"]
    return [f"{role}:{index}" for role, index in tasks_of(strategy)]


def lead_task(strategy: str) -> str:
    return "chief:0" if strategy == "parameter_server" else "worker:0"


def entrypoint(plan: Plan, runtime_callbacks: bool = True) -> list[str]:
    argv = [
        "python",
        "examples/digits.py",
        "--epochs",
        str(plan.epochs),
        "--steps-per-epoch",
        str(plan.steps_per_epoch),
        "--batch",
        str(plan.batch),
    ]
    return argv if runtime_callbacks else [*argv, "--without-runtime-callbacks"]


def window_steps(plan: Plan) -> int:
    """Training steps between the first and the last epoch end: the steps/s window."""
    return plan.steps_per_epoch * (plan.epochs - 1)


def read_run(
    lines: list[str], started: float, plan: Plan
) -> tuple[Run, tuple[float, float]] | None:
    """The run's figures from the lead task's output, once its last epoch has ended, and the
    steps/s window's wall-clock bounds."""
    first = next((float(m[1]) for line in lines if (m := FIRST_STEP.search(line))), None)
    ends = {int(m[1]): float(m[2]) for line in lines if (m := EPOCH_END.match(line))}
    if first is None or plan.epochs not in ends or 1 not in ends:
        return None
    window = (ends[1], ends[plan.epochs])
    run = Run(
        launch_s=round(first - started, 3),
        steps_per_s=round(window_steps(plan) / (window[1] - window[0]), 2),
    )
    return run, window


def per_step(sampler: CpuSampler, window: tuple[float, float], plan: Plan) -> dict[str, float]:
    """Milliseconds per step in the window of each sampled name's counter, the machine left out."""
    return {
        name: round(1000 * used / window_steps(plan), 3)
        for name in sampler.names()
        if (used := sampler.used(name, *window)) is not None
    }


def cpu_per_step(sampler: CpuSampler, window: tuple[float, float], plan: Plan) -> dict[str, float]:
    """CPU milliseconds per step in the window, for every sampled name and the machine."""
    per_step: dict[str, float] = {}
    for name in [*sampler.names(), MACHINE]:
        used = sampler.used(name, *window)
        if used is not None:
            per_step[name] = round(1000 * used / window_steps(plan), 3)
    return per_step


# --- by hand -----------------------------------------------------------------------------------


def hand_script(strategy: str, plan: Plan, logs: Path) -> str:
    """What one writes without a control plane: TF_CONFIG per process, all started at once,
    then wait for the lead task (under parameter_server the workers and the ps serve until
    stopped, so the script stops them when the chief is done)."""
    tasks = tasks_of(strategy)
    cluster: dict[str, list[str]] = {}
    for role, _ in tasks:
        cluster.setdefault(role, []).append(f"127.0.0.1:{free_port()}")
    command = shlex.join([PYTHON, *entrypoint(plan)[1:]])
    lines = [
        "#!/bin/sh",
        f"cd {shlex.quote(str(REPO))}",
        "export TF_USE_LEGACY_KERAS=1 GRPC_FAIL_FAST=use_caller PYTHONUNBUFFERED=1",
        f"export STRATA_STRATEGY={strategy}",
        "pids=",
    ]
    for role, index in tasks:
        config = json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
        log = shlex.quote(str(logs / f"{role}-{index}.log"))
        start = f"TF_CONFIG={shlex.quote(config)} {command} > {log} 2>&1 &"
        pid_file = shlex.quote(str(logs / f"{role}-{index}.pid"))
        if f"{role}:{index}" == lead_task(strategy):
            lines += [start, "lead=$!", f"echo $lead > {pid_file}"]
        else:
            lines += [start, 'pids="$pids $!"', f"echo $! > {pid_file}"]
    if strategy == "parameter_server":
        lines += ["wait $lead", "status=$?", "kill $pids 2>/dev/null", "wait", "exit $status"]
    else:
        lines += ["wait $lead", "status=$?", "wait", "exit $status"]
    return "\n".join(lines) + "\n"


def run_by_hand(strategy: str, plan: Plan, workdir: Path, profiles: Path | None = None) -> Run:
    """One hand-started run; with `profiles`, py-spy samples the tasks that run the script
    into that folder."""
    logs = Path(tempfile.mkdtemp(prefix=f"hand-{strategy}-", dir=workdir))
    script = logs / "launch.sh"
    script.write_text(hand_script(strategy, plan, logs))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATA_", "TF_CONFIG"))}
    with CpuSampler() as sampler:
        started, busy = time.time(), machine_busy_seconds()
        done = subprocess.Popen(["sh", str(script)], env=env)
        pids = {}
        for role, index in tasks_of(strategy):
            pid_file = logs / f"{role}-{index}.pid"
            while not pid_file.exists() or not pid_file.read_text().strip():
                time.sleep(0.02)
            pids[f"{role}:{index}"] = int(pid_file.read_text())
            sampler.watch(f"{role}:{index}", pids[f"{role}:{index}"])
        recorders = profile_tasks(pids, strategy, profiles)
        done.wait(timeout=600)
        for recorder in recorders:
            profiling.finish(recorder)
        machine_cores = (machine_busy_seconds() - busy) / (time.time() - started)
    lead = logs / f"{lead_task(strategy).replace(':', '-')}.log"
    lines = lead.read_text().splitlines()
    read = read_run(lines, started, plan)
    if done.returncode != 0 or read is None:
        raise RuntimeError(f"hand-started {strategy} job failed ({done.returncode}): {lines[-20:]}")
    run, window = read
    run.machine_cores = round(machine_cores, 2)
    run.cpu_ms_per_step = cpu_per_step(sampler, window, plan)
    return run


def profile_tasks(
    pids: dict[str, int], strategy: str, into: Path | None
) -> list[subprocess.Popen[bytes]]:
    """py-spy on each task that runs the script (`into`/<task>.txt); nothing without `into`
    or without py-spy."""
    if into is None:
        return []
    recorders = []
    for task in script_tasks(strategy):
        pid = pids[task]
        path = into / f"{task.replace(':', '-')}.txt"
        path.unlink(missing_ok=True)
        recorder = profiling.start(pid, 600, path, rate=TASK_PROFILE_RATE)
        if recorder is not None:
            recorders.append(recorder)
    return recorders


# --- under Strata ------------------------------------------------------------------------------


def job_spec(
    strategy: str, plan: Plan, number: int, runtime_callbacks: bool = True, warm: bool = False
) -> dict[str, Any]:
    replicas: dict[str, Any] = {"worker": {"count": 2, "gpus": 1}, "evaluator": {"count": 0}}
    if strategy == "parameter_server":
        replicas |= {"chief": {"count": 1}, "ps": {"count": 1}}
    bare = ("" if runtime_callbacks else "-bare") + ("-warm" if warm else "")
    return {
        "name": f"bench-launch-{strategy.replace('_', '-')}{bare}-{number}",
        "strategy": strategy,
        "warm_start": warm,
        "entrypoint": entrypoint(plan, runtime_callbacks),
        "replicas": replicas,
        "checkpoint": {"every_epochs": None},
        "restart": {"policy": "never"},
    }


def run_under_strata(
    cluster: Cluster,
    strategy: str,
    plan: Plan,
    number: int,
    *,
    runtime_callbacks: bool = True,
    profiles: Path | None = None,
    warm: bool = False,
    run_delay: bool = False,
) -> Run:
    """One run through `POST /jobs`; with `profiles`, py-spy samples the tasks that run the
    script into that folder; with `run_delay`, each task's wait for a CPU is sampled too."""
    spec = job_spec(strategy, plan, number, runtime_callbacks, warm)
    server, agents = cluster.process.pid, cluster.agent_pids()
    control_plane = [server, *agents]
    control_cpu = sum(cpu_seconds(pid) for pid in control_plane)
    recorders: list[subprocess.Popen[bytes]] = []
    with CpuSampler() as sampler, CpuSampler(read=run_delay_seconds) as delays:
        sampler.watch(SERVER, server)
        sampler.watch(AGENTS, *agents)
        started, busy = time.time(), machine_busy_seconds()
        job_id: int = cluster.submit(spec)["id"]
        try:
            pids = task_pids(cluster, job_id, strategy)
            for task, pid in pids.items():
                sampler.watch(task, pid)
                if run_delay:
                    delays.watch(task, pid)
            recorders = profile_tasks(pids, strategy, profiles)
            refills = None
            if warm:
                refills, importing = refill_scheduling(cluster, set(pids.values()))
                sampler.watch(REFILLS, *importing)
            # Polling the server while the job trains would cost it CPU that the hand-started
            # variant does not pay: wait for the lead process to end, then ask once or twice.
            wait_exited(pids[lead_task(strategy)], timeout=600)
            job = cluster.wait_for(
                job_id, lambda j: j["status"] in ("succeeded", "failed"), 600, "finished"
            )
            wall = time.time() - started
            machine_cores = (machine_busy_seconds() - busy) / wall
            control_cores = (sum(cpu_seconds(pid) for pid in control_plane) - control_cpu) / wall
        finally:
            for recorder in recorders:
                profiling.finish(recorder)
            wait_no_processes(job_id, server=cluster.url, timeout=60)
    lines = cluster.logs(job_id, lead_task(strategy))
    read = read_run(lines, started, plan)
    if job["status"] != "succeeded" or read is None:
        raise RuntimeError(f"strata {strategy} job {job_id}: {job['status']}: {lines[-20:]}")
    run, window = read
    spawned = [
        datetime.fromisoformat(event["at"]).timestamp()
        for event in cluster.events(job_id)
        if event["kind"] == "task_status" and event["data"].get("to") == "running"
    ]
    run.spawned_s = round(max(spawned) - started, 3)
    run.machine_cores = round(machine_cores, 2)
    run.control_plane_cores = round(control_cores, 2)
    run.cpu_ms_per_step = cpu_per_step(sampler, window, plan)
    if run_delay:
        run.run_delay_ms_per_step = per_step(delays, window, plan)
    run.refills = refills
    return run


def refill_scheduling(
    cluster: Cluster, tasks: set[int], after: float = 1.0
) -> tuple[dict[str, int], list[int]]:
    """The warm processes that are importing (neither the job's tasks nor ready in their
    agent's log) `after` seconds from now, counted by their main thread's scheduling policy,
    and their pids."""
    time.sleep(after)  # the refills' interpreters start before they lower their priority
    ready = set()
    for log in (cluster.data_dir / "agents").glob("*.log"):
        ready |= {int(pid) for pid in READY.findall(log.read_text(errors="replace"))}
    counts, importing = {"idle": 0, "normal": 0}, []
    for pid in set(warm_process_pids()) - tasks - ready:
        try:
            idle = os.sched_getscheduler(pid) == os.SCHED_IDLE
        except OSError:  # it just became ready and was taken, or ended
            continue
        counts["idle" if idle else "normal"] += 1
        importing.append(pid)
    return counts, importing


def wait_exited(pid: int, timeout: float) -> None:
    """Until the process is gone (its agent, the parent, has reaped it)."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} still running after {timeout:.0f} s")
        time.sleep(0.1)


def task_pids(cluster: Cluster, job_id: int, strategy: str) -> dict[str, int]:
    """Every task's pid ("chief:0" → pid), once its agent has reported it started."""
    wanted = {f"{role}:{index}" for role, index in tasks_of(strategy)}
    pids: dict[str, int] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for event in cluster.events(job_id):
            data = event["data"]
            if event["task"] in wanted and data.get("to") == "running" and data.get("pid"):
                pids[event["task"]] = int(data["pid"])
        if len(pids) == len(wanted):
            return pids
        time.sleep(0.02)
    raise TimeoutError(f"tasks {sorted(wanted - set(pids))} of job {job_id} not started in 120 s")


# --- the run -----------------------------------------------------------------------------------


def ray_variant() -> tuple[Any, str] | None:
    """Ray Train's runner and version, when ray is installed (the bench extra)."""
    try:
        from bench import ray_peer

        # PackageNotFoundError, an ImportError, when ray is not installed.
        return ray_peer.ray_mwm_run, ray_peer.ray_version()
    except ImportError:
        return None


def variants_for(strategy: str, with_ray: bool) -> list[str]:
    ray = ["ray"] if with_ray and strategy == "multi_worker_mirrored" else []
    return ["strata", "strata_warm", "strata_bare", "hand", *ray]


def wait_pools_full(cluster: Cluster, agents: int) -> None:
    """Until every local agent has its whole warm pool idle again (see the docstring)."""
    deadline = time.monotonic() + 300
    while any(
        idle_warm_processes(cluster.data_dir / "agents" / f"local-{index}.log") < WARM_POOL
        for index in range(agents)
    ):
        if time.monotonic() > deadline:
            raise TimeoutError("the agents' warm pools did not refill within 300 s")
        time.sleep(0.5)


def measure(plan: Plan, with_ray: bool, workdir: Path) -> dict[str, Any]:
    ray = ray_variant() if with_ray else None
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        strategy: {variant: [] for variant in variants_for(strategy, ray is not None)}
        for strategy in STRATEGIES
    }
    os.environ["STRATA_AGENT_WARM_POOL"] = str(WARM_POOL)
    with local_cluster(workdir / "cluster", agents=2, gpus_per_agent=2) as cluster:
        for number in range(plan.runs):
            for strategy in STRATEGIES:
                variants = list(runs[strategy])
                # Rotate the order: whatever drifts during a run favours no variant.
                shift = number % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    wait_pools_full(cluster, agents=2)
                    if variant in ("strata", "strata_bare", "strata_warm"):
                        run = run_under_strata(
                            cluster,
                            strategy,
                            plan,
                            number,
                            runtime_callbacks=variant != "strata_bare",
                            warm=variant == "strata_warm",
                        )
                    elif variant == "hand":
                        run = run_by_hand(strategy, plan, workdir)
                    else:
                        assert ray is not None
                        result = ray[0](
                            workers=2,
                            epochs=plan.epochs,
                            steps_per_epoch=plan.steps_per_epoch,
                            batch=plan.batch,
                            workdir=workdir,
                        )
                        run = Run(
                            launch_s=round(result.launch_seconds, 3),
                            steps_per_s=round(result.steps_per_second, 2),
                        )
                    runs[strategy][variant].append(asdict(run))
                    print(
                        f"  run {number + 1} {strategy} {variant}: launch {run.launch_s:.2f} s, "
                        f"{run.steps_per_s:.1f} steps/s",
                        flush=True,
                    )
        profiles = profile_tasks_of_jobs(cluster, plan, workdir)
    return {"runs": runs, "ray_version": ray[1] if ray is not None else None, "profiles": profiles}


def task_profile(path: Path) -> dict[str, object]:
    """A task's samples by stage, imports left out: every variant imports the same modules
    once at start, and steps/s is measured well after that."""
    return profiling.summarize(path, profiling.TASK_STAGES, top=8, exclude=profiling.IMPORTING)


def profile_tasks_of_jobs(cluster: Cluster, plan: Plan, workdir: Path) -> dict[str, Any]:
    """One more run of each job, under Strata and by hand, not counted in the figures above:
    py-spy samples every task, to show what a Strata-run task does that a hand-started one
    does not (the runtime's callbacks, its metric sender, its backups)."""
    summaries: dict[str, Any] = {}
    for strategy in STRATEGIES:
        for variant in ("strata", "hand"):
            into = RESULTS / "profiles" / f"launch-{strategy}-{variant}"
            into.mkdir(parents=True, exist_ok=True)
            if variant == "strata":
                run_under_strata(cluster, strategy, plan, plan.runs, profiles=into)
            else:
                run_by_hand(strategy, plan, workdir, profiles=into)
            summaries[f"{strategy}-{variant}"] = {
                task: task_profile(into / f"{task.replace(':', '-')}.txt")
                for task in script_tasks(strategy)
            }
            print(f"  profiled {strategy} {variant}: {summaries[f'{strategy}-{variant}']}")
    return summaries


def with_rest(cpu: dict[str, float]) -> dict[str, float]:
    """A run's CPU per step with the rest of the machine beside it: taken run by run, since a
    difference of medians (the machine's less the parts') is no run's figure."""
    if "machine" not in cpu:
        return cpu
    named = sum(ms for name, ms in cpu.items() if name not in ("machine", REFILLS, REST))
    return {**cpu, REST: max(0.0, cpu["machine"] - named)}


def summarise(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per job: each variant's spread, and Strata's ratios to the others run by run."""
    summary: dict[str, Any] = {}
    for strategy, variants in runs.items():
        entry: dict[str, Any] = {}
        for variant, measured in variants.items():
            entry[variant] = {
                "launch_s": spread([r["launch_s"] for r in measured]),
                "steps_per_s": spread([r["steps_per_s"] for r in measured]),
            }
            refills = [r["refills"] for r in measured if r.get("refills")]
            if refills:
                entry[variant]["refills"] = {
                    policy: sum(r.get(policy, 0) for r in refills) for policy in ("idle", "normal")
                }
            for optional in ("spawned_s", "machine_cores", "control_plane_cores"):
                values = [r[optional] for r in measured if r.get(optional) is not None]
                if values:
                    entry[variant][optional] = spread(values)
            per_step = [
                with_rest(r["cpu_ms_per_step"]) for r in measured if r.get("cpu_ms_per_step")
            ]
            names = sorted({name for run in per_step for name in run})
            if names:
                entry[variant]["cpu_ms_per_step"] = {
                    name: spread([run[name] for run in per_step if name in run]) for name in names
                }
        comparisons = [("strata", other) for other in variants if other != "strata"]
        if "strata_warm" in variants and "hand" in variants:
            comparisons.append(("strata_warm", "hand"))
        if "strata_bare" in variants and "hand" in variants:
            comparisons.append(("strata_bare", "hand"))
        for one, other in comparisons:
            pairs = list(zip(variants[one], variants[other], strict=True))
            entry[f"{one}_vs_{other}"] = {
                "launch_ratio": spread([s["launch_s"] / o["launch_s"] for s, o in pairs]),
                "steps_ratio": spread([s["steps_per_s"] / o["steps_per_s"] for s, o in pairs]),
            }
        summary[strategy] = entry
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 runs of shorter jobs (~5 min)")
    parser.add_argument("--runs", type=int, default=None, help="runs per variant")
    parser.add_argument("--no-ray", action="store_true", help="leave Ray Train out")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.runs is not None:
        plan = Plan(**{**asdict(plan), "runs": args.runs})
    began = time.monotonic()
    machine = machine_info()  # the load average at the start, before the run adds its own
    with tempfile.TemporaryDirectory(prefix="strata-bench-launch-") as tmp:
        workdir = Path(tmp)
        print(f"launch: TensorFlow import floor ({plan.import_repeats} runs)", flush=True)
        floor = tensorflow_import_seconds(plan.import_repeats)
        print(f"  import tensorflow: {floor['median']:.2f} s", flush=True)
        measured = measure(plan, not args.no_ray, workdir)
    result = {
        "machine": machine,
        "plan": asdict(plan),
        "quick": args.quick,
        "tensorflow_import_s": floor,
        "ray_version": measured["ray_version"],
        "runs": measured["runs"],
        "summary": summarise(measured["runs"]),
        "task_profiles": measured["profiles"],
        "seconds": round(time.monotonic() - began, 1),
    }
    write_result("launch", result)
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
