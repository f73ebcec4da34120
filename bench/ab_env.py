"""The environment and scheduling a by-hand task gets in the A/B launch benchmark (bench/ab.py).

The base is bench/launch.py's shell script's: the benchmark's own environment without STRATA_*
and TF_CONFIG, plus what one types by hand (TF_CONFIG, TF_USE_LEGACY_KERAS, GRPC_FAIL_FAST,
PYTHONUNBUFFERED, STRATA_STRATEGY). The `env` knob swaps that for what the agent really gives a
task, built by the server's and the agent's own code (JobLaunch, task_env), less the variables
that switch the runtime library on; the runtime knob adds those back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from agents.environment import TaskEnvironment
from agents.host.launcher import GRPC_OPTIONS_ENV, GRPC_RECONNECT_OPTIONS, task_env
from agents.protocol import TaskKey
from backend.auth import TokenKind, TokenRegistry
from backend.jobs.spec import JobSpec
from backend.scheduling.launch import JobLaunch
from bench.ab_variants import Knobs

# With these three a task reports to the server, keeps backups and writes event files.
RUNTIME_SWITCHES = tuple(
    TaskEnvironment.variable(field) for field in ("server", "task_token", "checkpoint_dir")
)
# What the runtime needs to report as one task attempt of a job.
RUNTIME_VARIABLES = (
    *RUNTIME_SWITCHES,
    *(TaskEnvironment.variable(f) for f in ("job_id", "task", "attempt", "checkpoint_policy")),
)
# A job id that no job of the benchmark's cluster has: with the `env` knob but no runtime the
# task's STRATA_JOB_ID must not make it look like a job's process to the Strata variants'
# clean-up (tests.support.cluster.job_processes).
UNUSED_JOB_ID = 2_000_000_000


@dataclass(frozen=True)
class Job:
    """What the server would know of the job: its spec, its id, and where it runs."""

    spec: dict[str, Any]
    job_id: int
    server_url: str
    admin_token: str
    checkpoint_root: Path


def hand_env(strategy: str, tf_config: Mapping[str, Any]) -> dict[str, str]:
    """bench/launch.py's hand_script environment for one task."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATA_", "TF_CONFIG"))}
    env |= {
        "TF_USE_LEGACY_KERAS": "1",
        "GRPC_FAIL_FAST": "use_caller",
        "PYTHONUNBUFFERED": "1",
        "STRATA_STRATEGY": strategy,
        "TF_CONFIG": json.dumps(dict(tf_config)),
    }
    return env


def agent_env(job: Job, task: str, gpus: list[int], tf_config: dict[str, Any]) -> dict[str, str]:
    """Everything the agent would give this task: the server's start message (JobLaunch) over
    what a task inherits from the agent (task_env), the runtime's switches included."""
    token = TokenRegistry({TokenKind.admin: SecretStr(job.admin_token)}).task_token(job.job_id)
    launch = JobLaunch.of(
        spec=JobSpec.model_validate(job.spec),
        job_id=job.job_id,
        task_token=token,
        checkpoint_root=job.checkpoint_root,
    )
    key = TaskKey(job_id=job.job_id, task=task, attempt=0)
    start = launch.environment(key=key, gpus=gpus, tf_config=tf_config)
    return task_env(os.environ, start, job.server_url, None)


def task_gpus(task: str) -> list[int]:
    """The devices Strata gives the task in bench/launch.py's job: one per worker."""
    return [0] if task.startswith("worker:") else []


def knob_env(
    knobs: Knobs, strategy: str, task: str, tf_config: dict[str, Any], job: Job
) -> dict[str, str]:
    """A task's environment with these knobs on (see bench/ab_variants.Knobs)."""
    env = hand_env(strategy, tf_config)
    full = agent_env(job, task, task_gpus(task), tf_config)
    if knobs.env:
        env = {k: v for k, v in full.items() if k not in RUNTIME_SWITCHES}
    if knobs.grpc_options:
        env.setdefault(GRPC_OPTIONS_ENV, GRPC_RECONNECT_OPTIONS)
    if knobs.threads:  # every task of the benchmark's jobs is on this host
        tasks = sum(len(addresses) for addresses in tf_config["cluster"].values())
        share = str(max(1, len(os.sched_getaffinity(0)) // tasks))
        env["TF_NUM_INTRAOP_THREADS"] = share  # inter-op 1 hangs a parameter_server job
    if knobs.runtime != "off":
        env |= {k: full[k] for k in RUNTIME_VARIABLES if k in full}
        if knobs.runtime == "backups":  # a checkpoint dir, but nothing to report to
            env.pop(TaskEnvironment.variable("server"), None)
            env.pop(TaskEnvironment.variable("task_token"), None)
    return env


@dataclass(frozen=True)
class Scheduling:
    """A process's nice value, scheduling policy (with its priority) and CPU affinity."""

    nice: int
    policy: int
    priority: int
    cpus: frozenset[int]

    @classmethod
    def of(cls, pid: int) -> Scheduling:
        return cls(
            nice=os.getpriority(os.PRIO_PROCESS, pid),
            policy=os.sched_getscheduler(pid),
            priority=os.sched_getparam(pid).sched_priority,
            cpus=frozenset(os.sched_getaffinity(pid)),
        )

    def apply(self) -> None:  # pragma: no cover - runs in the child between fork and exec
        os.setpriority(os.PRIO_PROCESS, 0, self.nice)
        os.sched_setscheduler(0, self.policy, os.sched_param(self.priority))
        os.sched_setaffinity(0, self.cpus)

    def describe(self) -> dict[str, Any]:
        return {
            "nice": self.nice,
            "policy": self.policy,
            "priority": self.priority,
            "cpus": sorted(self.cpus),
        }
