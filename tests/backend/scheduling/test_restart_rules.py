"""Who restarts on what, and which failures a policy retries."""

from __future__ import annotations

import pytest

from backend.scheduling.restart_rules import RestartPlan, backoff_seconds, plan_restart, retryable

PS = ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]
MWM = ["chief:0", "worker:0", "worker:1"]


@pytest.mark.parametrize(
    ("strategy", "tasks", "failed", "plan"),
    [
        ("parameter_server", PS, "worker:1", RestartPlan(frozenset({"worker:1"}), False)),
        ("parameter_server", PS, "ps:0", RestartPlan(frozenset({"ps:0", "chief:0"}), True)),
        ("parameter_server", PS, "chief:0", RestartPlan(frozenset({"chief:0"}), True)),
        ("parameter_server", PS, "evaluator:0", RestartPlan(frozenset({"evaluator:0"}), False)),
        ("multi_worker_mirrored", MWM, "worker:1", RestartPlan(frozenset(MWM), True)),
        ("multi_worker_mirrored", MWM, "chief:0", RestartPlan(frozenset(MWM), True)),
        ("mirrored", ["chief:0"], "chief:0", RestartPlan(frozenset({"chief:0"}), True)),
    ],
)
def test_role_rules(strategy: str, tasks: list[str], failed: str, plan: RestartPlan) -> None:
    assert plan_restart(strategy, failed, tasks) == plan


@pytest.mark.parametrize(
    ("policy", "exit_code", "error", "lost", "expected"),
    [
        ("never", 137, None, False, False),
        ("never", None, None, True, False),
        ("on_failure", 1, None, False, True),
        ("on_failure", 0, None, False, True),  # a ps that should have kept serving
        ("on_failure", None, "working_dir 'x' does not exist", False, False),
        ("exit_code", 1, None, False, False),
        ("exit_code", 137, None, False, True),
        ("exit_code", 143, None, False, True),
        ("exit_code", None, None, True, True),
    ],
)
def test_policies(
    policy: str, exit_code: int | None, error: str | None, lost: bool, expected: bool
) -> None:
    assert retryable(policy=policy, exit_code=exit_code, error=error, host_lost=lost) is expected


def test_a_kill_over_the_tasks_own_memory_limit_is_no_infrastructure_failure() -> None:
    assert not retryable(policy="exit_code", exit_code=137, error=None, over_own_memory_limit=True)
    assert retryable(policy="on_failure", exit_code=137, error=None, over_own_memory_limit=True)


def test_backoff_doubles_up_to_a_ceiling() -> None:
    assert [backoff_seconds(2, n) for n in range(4)] == [2, 4, 8, 16]
    assert backoff_seconds(2, 20) == 300
    assert backoff_seconds(0, 5) == 0
