"""Which exits end a job, and how (ARCHITECTURE §4)."""

from __future__ import annotations

import pytest

from agents.vocabulary import TaskName
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.outcome import Outcome, describe_exit, judge_exit

R, S = TaskStatus.running, TaskStatus.succeeded


def judge(
    strategy: str,
    task: str,
    code: int | None = 0,
    *,
    siblings: list[tuple[str, TaskStatus]] | None = None,
    job: JobStatus = JobStatus.running,
    signal: int | None = None,
    error: str | None = None,
) -> Outcome:
    return judge_exit(
        strategy=strategy,
        role=TaskName.parse(task).role,
        task=task,
        exit_code=code,
        signal=signal,
        error=error,
        job_status=job,
        sibling_statuses=siblings or [],
    )


def test_chief_success_ends_a_ps_job() -> None:
    outcome = judge("parameter_server", "chief:0", siblings=[("worker", R), ("ps", R)])
    assert outcome == Outcome(S, JobStatus.succeeded, "chief:0 exited with code 0")


def test_ps_server_exiting_is_a_failure_even_with_code_zero() -> None:
    outcome = judge("parameter_server", "ps:0", 0, siblings=[("chief", R), ("worker", R)])
    assert outcome.job_status is JobStatus.failed
    assert "a ps must serve until the job ends" in outcome.reason


def test_crash_fails_the_job_with_the_code() -> None:
    outcome = judge("multi_worker_mirrored", "worker:1", 3, siblings=[("worker", R)])
    assert outcome == Outcome(TaskStatus.failed, JobStatus.failed, "worker:1 exited with code 3")


def test_signal_is_named() -> None:
    outcome = judge("parameter_server", "worker:0", 137, signal=9)
    assert outcome.reason == "worker:0 was killed by SIGKILL (exit code 137)"


def test_could_not_start() -> None:
    outcome = judge("mirrored", "chief:0", None, error="no such file: train.py")
    assert outcome == Outcome(
        TaskStatus.failed, JobStatus.failed, "chief:0 could not start: no such file: train.py"
    )


def test_mwm_without_chief_succeeds_when_the_last_worker_does() -> None:
    first = judge("multi_worker_mirrored", "worker:0", siblings=[("worker", R)])
    assert first == Outcome(S, None, "worker:0 exited with code 0")
    last = judge("multi_worker_mirrored", "worker:1", siblings=[("worker", S)])
    assert last.job_status is JobStatus.succeeded


def test_mwm_with_chief_is_decided_by_the_chief() -> None:
    worker = judge("multi_worker_mirrored", "worker:0", siblings=[("chief", R), ("worker", S)])
    assert worker.job_status is None
    chief = judge("multi_worker_mirrored", "chief:0", siblings=[("worker", R)])
    assert chief.job_status is JobStatus.succeeded


@pytest.mark.parametrize("task", ["chief:0", "worker:0"])
def test_mirrored_is_its_single_task(task: str) -> None:
    assert judge("mirrored", task).job_status is JobStatus.succeeded


def test_evaluator_never_decides_the_job() -> None:
    assert judge("parameter_server", "evaluator:0", 1) == Outcome(
        TaskStatus.failed, None, "evaluator:0 exited with code 1"
    )


def test_exits_after_the_job_ended_are_stops() -> None:
    outcome = judge("parameter_server", "ps:0", 143, signal=15, job=JobStatus.succeeded)
    assert outcome == Outcome(
        TaskStatus.stopped, None, "ps:0 was killed by SIGTERM (exit code 143)"
    )


def test_a_kill_over_the_memory_limit_says_so() -> None:
    outcome = judge_exit(
        strategy="multi_worker_mirrored",
        role=TaskName.parse("worker:1").role,
        task="worker:1",
        exit_code=137,
        signal=9,
        error=None,
        job_status=JobStatus.running,
        sibling_statuses=[("worker", R)],
        over_memory_limit=4 * 1024**3,
    )
    assert outcome.reason == "worker:1 was killed: over its 4 GiB memory limit"
    assert outcome.job_status is JobStatus.failed


def test_describe_unknown_signal() -> None:
    assert (
        describe_exit("chief:0", 200, 72, None) == "chief:0 was killed by signal 72 (exit code 200)"
    )
