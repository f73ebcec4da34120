"""The controller's index of what each agent last reported running."""

from __future__ import annotations

from agents.protocol import TaskKey
from backend.scheduling.running import RunningReports


def key(task: str = "worker:0", attempt: int = 0, job_id: int = 1) -> TaskKey:
    return TaskKey(job_id=job_id, task=task, attempt=attempt)


def test_a_host_that_runs_nothing_is_known_to_run_nothing() -> None:
    # None would mean "never reported": the controller compares such a host at every heartbeat.
    reports = RunningReports()
    assert reports.of("idle") is None
    reports.report("idle", frozenset())
    assert reports.of("idle") == frozenset()
    changes = reports.changes
    reports.report("idle", frozenset())
    assert reports.changes == changes


def test_earlier_attempts_are_counted_across_hosts_until_they_stop() -> None:
    reports = RunningReports()
    reports.report("a", frozenset({key(attempt=0)}))
    reports.report("b", frozenset({key(attempt=1), key("ps:0")}))
    assert reports.earlier_attempt_runs(1, "worker:0", 2)
    assert reports.earlier_attempt_runs(1, "worker:0", 1)
    assert not reports.earlier_attempt_runs(1, "worker:0", 0)
    reports.report("a", frozenset())
    assert reports.earlier_attempt_runs(1, "worker:0", 2)  # attempt 1 still runs on b
    assert not reports.earlier_attempt_runs(1, "worker:0", 1)
    reports.forget("b")
    assert reports.of("b") is None
    assert not reports.earlier_attempt_runs(1, "worker:0", 2)
    assert not reports.earlier_attempt_runs(1, "ps:0", 1)


def test_an_exit_frees_the_attempt_before_the_next_heartbeat() -> None:
    reports = RunningReports()
    reports.report("a", frozenset({key(attempt=0), key("ps:0")}))
    reports.exited("a", key(attempt=0))
    assert reports.of("a") == frozenset({key("ps:0")})
    assert not reports.earlier_attempt_runs(1, "worker:0", 1)
    reports.exited("a", key(attempt=0))  # resent after a reconnect: nothing more to do
    reports.exited("unknown", key(attempt=0))
    assert reports.of("unknown") is None


def test_a_start_report_adds_the_attempt_to_a_known_host() -> None:
    reports = RunningReports()
    reports.report("a", frozenset({key("ps:0")}))
    reports.started("a", key(attempt=1))
    assert reports.of("a") == frozenset({key("ps:0"), key(attempt=1)})
    assert reports.earlier_attempt_runs(1, "worker:0", 2)
    changes = reports.changes
    reports.started("a", key(attempt=1))  # reported twice: nothing more to do
    assert reports.changes == changes
    reports.started("unknown", key())  # never reported: its first heartbeat says it all
    assert reports.of("unknown") is None


def test_an_equal_report_is_kept_as_the_set_given_so_the_next_is_compared_by_identity() -> None:
    reports = RunningReports()
    reports.report("a", frozenset({key("ps:0")}))
    reports.started("a", key())
    heartbeat = frozenset({key("ps:0"), key()})  # built from the heartbeat's own keys
    assert reports.of("a") is not heartbeat
    changes = reports.changes
    assert reports.same("a", heartbeat)
    assert reports.of("a") is heartbeat
    assert reports.changes == changes  # nothing changed
    assert not reports.same("a", frozenset({key("ps:0")}))
    assert not reports.same("unknown", frozenset())
