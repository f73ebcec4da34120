"""Where this task sits in its job, read from the environment the agent sets.

Pure Python on purpose: the agent, the server's tests and scripts that never train can use it
without paying for a TensorFlow import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from agents.environment import TaskEnvironment, TaskEnvironmentError
from agents.vocabulary import TRAINING_ROLES, Role, Strategy

# The runtime's public name for a job's strategy (runtime.strategy_name() returns one).
StrategyName = Strategy


class ClusterConfigError(ValueError):
    """TF_CONFIG or a STRATA_* variable that cannot describe a task of a job."""


def task_environment(env: Mapping[str, str] | None = None) -> TaskEnvironment:
    """What the agent told this task (nothing, for a script run by hand)."""
    try:
        return TaskEnvironment.from_env(os.environ if env is None else env)
    except TaskEnvironmentError as exc:
        raise ClusterConfigError(str(exc)) from None


@dataclass(frozen=True)
class TFConfig:
    """A parsed TF_CONFIG: the job's cluster and this task's place in it."""

    cluster: Mapping[str, tuple[str, ...]]
    task_type: str
    task_index: int

    @property
    def address(self) -> str | None:
        """host:port this task serves on, or None when its role is not in the cluster."""
        addresses = self.cluster.get(self.task_type, ())
        return addresses[self.task_index] if self.task_index < len(addresses) else None

    @property
    def training_tasks(self) -> int:
        return sum(len(self.cluster.get(r, ())) for r in TRAINING_ROLES)

    def addresses(self, *roles: str) -> list[str]:
        return [address for r in roles for address in self.cluster.get(r, ())]


def parse_tf_config(raw: str) -> TFConfig:
    """Parses and checks a TF_CONFIG value; errors name the offending part."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ClusterConfigError(f"TF_CONFIG is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ClusterConfigError("TF_CONFIG must be a JSON object")

    raw_cluster = data.get("cluster") or {}
    if not isinstance(raw_cluster, dict):
        raise ClusterConfigError("TF_CONFIG.cluster must be an object of role -> [host:port]")
    cluster: dict[str, tuple[str, ...]] = {}
    for name, addresses in raw_cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ClusterConfigError(f"TF_CONFIG.cluster.{name} must be a list of host:port")
        cluster[str(name)] = tuple(addresses)

    task = data.get("task")
    if not isinstance(task, dict):
        raise ClusterConfigError("TF_CONFIG.task must be an object with type and index")
    task_type = task.get("type")
    task_index = task.get("index", 0)
    if not isinstance(task_type, str) or not task_type:
        raise ClusterConfigError("TF_CONFIG.task.type must be a non-empty string")
    if not isinstance(task_index, int) or isinstance(task_index, bool) or task_index < 0:
        raise ClusterConfigError("TF_CONFIG.task.index must be a non-negative integer")
    # A role that is absent from the cluster is allowed (the evaluator's TF_CONFIG may name only
    # its task), but a role that is present must have an address for this index.
    if task_type in cluster and task_index >= len(cluster[task_type]):
        raise ClusterConfigError(
            f"TF_CONFIG.task is {task_type}:{task_index} but the cluster has only "
            f"{len(cluster[task_type])} {task_type} task(s)"
        )
    return TFConfig(cluster=cluster, task_type=task_type, task_index=task_index)


def tf_config(env: Mapping[str, str] | None = None) -> TFConfig | None:
    """This task's TF_CONFIG, or None for a script run by hand without one."""
    raw = task_environment(env).tf_config
    return parse_tf_config(raw) if raw is not None else None


def role(env: Mapping[str, str] | None = None) -> str:
    """The task's role: chief, worker, ps or evaluator.

    STRATA_TASK (set by the agent, "worker:1") wins over TF_CONFIG; a process with neither is a
    single script run by hand, which is its own chief.
    """
    told = task_environment(env)
    if told.task is not None:
        return told.task.role
    config = tf_config(env)
    return config.task_type if config is not None else Role.chief


def strategy_name(env: Mapping[str, str] | None = None) -> Strategy:
    """The job's strategy: STRATA_STRATEGY, or inferred from TF_CONFIG for a hand-run script."""
    told = task_environment(env)
    if told.strategy is not None:
        return told.strategy
    config = tf_config(env)
    if config is None:
        return Strategy.mirrored
    if config.cluster.get(Role.ps):
        return Strategy.parameter_server
    if config.training_tasks > 1:
        return Strategy.multi_worker_mirrored
    return Strategy.mirrored


def local_cpu(strategy: object) -> str:
    """This task's CPU as a TF device name: where a checkpoint or export under
    parameter_server does its I/O (the coordinator's CPU, so that no ps needs the dir)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None) or Role.chief
    task_id = getattr(resolver, "task_id", None) or 0
    return f"/job:{task_type}/replica:0/task:{task_id}/device:CPU:0"
