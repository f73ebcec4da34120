"""One by-hand run of the A/B launch benchmark (bench/ab.py) with some of the agent's ways on.

The tasks are started from this process (asyncio's subprocess_exec, as the agent starts them)
instead of from bench/launch.py's shell script, so that each knob can be turned on alone: the
agent's environment, its pipes and line splitting, its session, its cgroups, its scheduling, the
runtime's server entry point and the runtime library (bench/ab_variants.Knobs).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.host.containment import Containment, Containments
from agents.host.launcher import DRAIN_SECONDS, TaskOutput
from agents.host.process import OutputProtocol, die_with_parent
from agents.host.warm_pool import WarmProcess
from agents.protocol import MAX_LOG_LINE, TaskKey
from bench.ab_env import Job, Scheduling, knob_env
from bench.ab_variants import Knobs
from bench.ab_warm import start_warm
from bench.cpu_sampler import CpuSampler
from bench.harness import REPO, machine_busy_seconds
from bench.launch import (
    AGENTS,
    SERVER,
    Plan,
    Run,
    cpu_per_step,
    entrypoint,
    lead_task,
    per_step,
    read_run,
    tasks_of,
)
from bench.run_delay import run_delay_seconds
from tests.support.postgres import free_port

SERVER_ENTRY = ["-m", "agents.runtime.server"]  # what Strata runs for PS workers and ps
STOP_SECONDS = 30.0  # for the PS servers to end on SIGTERM once the chief is done


@dataclass
class Setting:
    """What a run needs beyond its knobs: the job as the server would know it, the host's
    containments (None: not probed, or no cgroups), the agent's scheduling."""

    job: Job
    containments: Containments | None = None
    agent_scheduling: Scheduling | None = None
    # The running cluster's server and agents, idle beside a by-hand run: their CPU is
    # sampled as under Strata, so that what a job adds to them shows.
    server_pid: int | None = None
    agent_pids: list[int] = field(default_factory=list)


@dataclass
class Started:
    task: str
    transport: asyncio.SubprocessTransport
    protocol: OutputProtocol
    containment: Containment | None
    lines: list[str] = field(default_factory=list)
    piped: bool = False  # its output is on pipes, to be drained once it has exited

    @property
    def pid(self) -> int:
        return self.transport.get_pid()


def task_argv(strategy: str, task: str, plan: Plan, knobs: Knobs) -> list[str]:
    if knobs.server_entry and strategy == "parameter_server" and task != "chief:0":
        return [sys.executable, *SERVER_ENTRY]
    script = entrypoint(plan)[1:]
    if knobs.local_reads:
        return [sys.executable, "-m", "bench.local_reads", *script]
    return [sys.executable, *script]


def cluster_configs(strategy: str) -> dict[str, dict[str, Any]]:
    """TF_CONFIG of every task, on free loopback ports."""
    tasks = tasks_of(strategy)
    cluster: dict[str, list[str]] = {}
    for role, _ in tasks:
        cluster.setdefault(role, []).append(f"127.0.0.1:{free_port()}")
    return {
        f"{role}:{index}": {"cluster": cluster, "task": {"type": role, "index": index}}
        for role, index in tasks
    }


def preexec_for(
    knobs: Knobs, containment: Containment | None, scheduling: Scheduling | None
) -> Callable[[], None] | None:
    """What the child does between fork and exec; None when nothing (subprocess then spawns
    the way it would for the shell script's tasks)."""
    steps: list[Callable[[], None]] = []
    if containment is not None:
        steps.append(containment.preexec)
    if knobs.session or knobs.group:
        steps.append(die_with_parent)
    if scheduling is not None:
        steps.append(scheduling.apply)
    if not steps:
        return None

    def preexec() -> None:  # pragma: no cover - runs in the child
        for step in steps:
            step()

    return preexec


async def hand_to_warm(
    task: str, argv: list[str], env: dict[str, str], warm: WarmProcess, setting: Setting
) -> Started:
    """The task given to a warm process, its output cut into lines as the agent's is."""
    key = TaskKey(job_id=setting.job.job_id, task=task, attempt=0)
    lines: list[str] = []
    output = TaskOutput(key, lambda _key, new: lines.extend(new), MAX_LOG_LINE)
    warm.hand_output(output.feed)
    # The agent hands a warm process `python script ...` (its own interpreter runs it).
    await warm.assign(env, REPO, ["python", *argv[1:]])
    return Started(task, warm.transport, warm.protocol, None, lines, piped=True)


async def start_task(
    task: str, argv: list[str], env: dict[str, str], knobs: Knobs, setting: Setting, logs: Path
) -> Started:
    key = TaskKey(job_id=setting.job.job_id, task=task, attempt=0)
    containment = None
    if knobs.cgroup and setting.containments is not None:
        containments = setting.containments
        if not knobs.memory_cgroup:  # the same cgroups, less the memory controller's
            containments = Containments(
                containments.namespace, containments.killer, containments.v2
            )
        containment = containments.create(key)
    scheduling = setting.agent_scheduling if knobs.agent_sched else None
    spawn = functools.partial(
        asyncio.get_running_loop().subprocess_exec,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=knobs.session,
        process_group=0 if knobs.group else None,
        preexec_fn=preexec_for(knobs, containment, scheduling),
    )
    lines: list[str] = []
    if knobs.pipes:
        output = TaskOutput(key, lambda _key, new: lines.extend(new), MAX_LOG_LINE)
        transport, protocol = await spawn(
            lambda: OutputProtocol(output.feed),
            *argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    else:
        with (logs / f"{task.replace(':', '-')}.log").open("wb") as log:
            transport, protocol = await spawn(
                lambda: OutputProtocol(lambda _fd, _data: None),
                *argv,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    if containment is not None:
        containment.attach(transport.get_pid())
    return Started(task, transport, protocol, containment, lines, piped=knobs.pipes)


async def finish(started: list[Started], lead: Started, strategy: str) -> None:
    """Until the lead task ends; then, under parameter_server, SIGTERM to the servers (as the
    shell script's `kill`), and every process reaped, its pipes drained, its cgroups gone."""
    await lead.protocol.exited
    if strategy == "parameter_server":
        for other in started:
            if other is not lead and not other.protocol.exited.done():
                with contextlib.suppress(ProcessLookupError):
                    other.transport.send_signal(signal.SIGTERM)
    async with asyncio.timeout(STOP_SECONDS):
        await asyncio.gather(*(s.protocol.exited for s in started))
    for one in started:
        if one.piped:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_SECONDS):
                    await asyncio.gather(*one.protocol.closed.values())
        one.transport.close()
        if one.containment is not None:
            one.containment.main_exited()
            await one.containment.end(within=5)


async def run_tasks(
    strategy: str, plan: Plan, knobs: Knobs, setting: Setting, logs: Path, *samplers: CpuSampler
) -> tuple[Started, int | None]:
    """Starts every task, watches each in the samplers, waits for the run to end; the lead
    task and its exit code."""
    configs = cluster_configs(strategy)
    started: list[Started] = []
    # As the agent's pool has them: every warm process ready before the job comes.
    warm = [await start_warm(knobs.idle_import) for _ in configs] if knobs.warm else []
    try:
        for task, config in configs.items():
            env = knob_env(knobs, strategy, task, config, setting.job)
            argv = task_argv(strategy, task, plan, knobs)
            if warm:
                one = await hand_to_warm(task, argv, env, warm.pop(), setting)
            else:
                one = await start_task(task, argv, env, knobs, setting, logs)
            for sampler in samplers:
                sampler.watch(task, one.pid)
            started.append(one)
        lead = next(s for s in started if s.task == lead_task(strategy))
        await finish(started, lead, strategy)
    finally:
        for unused in warm:
            unused.discard()
        for one in started:
            if not one.protocol.exited.done():
                with contextlib.suppress(ProcessLookupError):
                    one.transport.kill()
    return lead, lead.transport.get_returncode()


def run_hand(strategy: str, plan: Plan, knobs: Knobs, setting: Setting, workdir: Path) -> Run:
    """One by-hand run with these knobs; its figures as bench/launch.py's Run."""
    logs = Path(tempfile.mkdtemp(prefix=f"ab-{strategy}-", dir=workdir))
    with CpuSampler() as sampler, CpuSampler(read=run_delay_seconds) as delays:
        if setting.server_pid is not None:
            sampler.watch(SERVER, setting.server_pid)
        if setting.agent_pids:
            sampler.watch(AGENTS, *setting.agent_pids)
        started, busy = time.time(), machine_busy_seconds()
        lead, code = asyncio.run(run_tasks(strategy, plan, knobs, setting, logs, sampler, delays))
        machine_cores = (machine_busy_seconds() - busy) / (time.time() - started)
    log_path = logs / f"{lead.task.replace(':', '-')}.log"
    lines = lead.lines if lead.piped else log_path.read_text(errors="replace").splitlines()
    read = read_run(lines, started, plan)
    if code != 0 or read is None:
        raise RuntimeError(f"by-hand {strategy} run ({knobs}) failed ({code}): {lines[-20:]}")
    run, window = read
    run.machine_cores = round(machine_cores, 2)
    run.cpu_ms_per_step = cpu_per_step(sampler, window, plan)
    run.run_delay_ms_per_step = per_step(delays, window, plan)
    return run
