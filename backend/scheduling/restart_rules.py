"""Who restarts on what (ARCHITECTURE §4). Pure: no I/O.

* A parameter_server worker is restarted alone, at the same host:port: the coordinator
  reschedules its closures and training goes on.
* A ps death restarts the ps and the chief, which resumes from its last backup.
* A chief death restarts the chief.
* Under multi_worker_mirrored any worker's death restarts every training task: a collective
  cannot go on with a member missing.
* A mirrored job is its one task.
A lost host is different: its tasks cannot keep their addresses, so the job is re-placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agents.vocabulary import Role, Strategy, TaskName

BACKOFF_CEILING_SECONDS = 300.0


def retryable(
    *,
    policy: str,
    exit_code: int | None,
    error: str | None,
    host_lost: bool = False,
    over_own_memory_limit: bool = False,
) -> bool:
    """Whether the spec's restart policy covers this failure.

    `exit_code` retries only infrastructure failures: a lost host, or death by a signal or
    the OOM killer (exit codes ≥ 128), but not a kill for going over the task's own memory
    limit (the spec's, which it would go over again). A task that could not be started at all
    (a missing program, a bad working dir) fails the same way every time and is never retried.
    """
    if policy == "never":
        return False
    if host_lost:
        return True
    if error is not None or exit_code is None:
        return False
    if policy == "on_failure":
        return True
    return exit_code >= 128 and not over_own_memory_limit


@dataclass(frozen=True)
class RestartPlan:
    tasks: frozenset[str]  # names of the tasks to restart, e.g. {"ps:0", "chief:0"}
    job_level: bool  # False when one task restarts while the job goes on running


def plan_restart(strategy: str, failed: str, tasks: Sequence[str]) -> RestartPlan:
    """Which tasks restart together when `failed` died (`tasks`: the job's task names)."""
    role = TaskName.parse(failed).role
    roles = {name: TaskName.parse(name).role for name in tasks}
    training = frozenset(t for t, r in roles.items() if r is not Role.evaluator)
    if role is Role.evaluator:
        return RestartPlan(frozenset({failed}), job_level=False)
    if strategy == Strategy.parameter_server:
        if role is Role.worker:
            return RestartPlan(frozenset({failed}), job_level=False)
        if role is Role.ps:
            chiefs = {t for t in training if roles[t] is Role.chief}
            return RestartPlan(frozenset({failed, *chiefs}), job_level=True)
        return RestartPlan(frozenset({failed}), job_level=True)
    if strategy == Strategy.multi_worker_mirrored:
        return RestartPlan(training, job_level=True)
    return RestartPlan(frozenset({failed}), job_level=True)


def backoff_seconds(base: float, restarts_so_far: int) -> float:
    """base, then twice, four times... that for later restarts; at most five minutes."""
    return min(BACKOFF_CEILING_SECONDS, base * 2.0 ** min(max(0, restarts_so_far), 30))
