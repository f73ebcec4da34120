"""The job state machine: each legal change works and is recorded; every other is refused."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from backend.jobs.models import Job, JobEvent
from backend.jobs.spec import validate_spec
from backend.jobs.states import JOB_TRANSITIONS, JobStatus, can_transition
from backend.scheduling.lifecycle import IllegalTransition, status_change, transition_job
from tests.conftest import Api
from tests.support.factories import create_job, make_spec

S = JobStatus

# The lifecycle as documented: the happy path, restarts, and the ways a job ends.
EXPECTED_LEGAL = {
    (S.pending, S.scheduled),
    (S.pending, S.failed),
    (S.pending, S.cancelled),
    (S.scheduled, S.running),
    (S.scheduled, S.pending),
    (S.scheduled, S.restarting),
    (S.scheduled, S.succeeded),
    (S.scheduled, S.failed),
    (S.scheduled, S.cancelled),
    (S.running, S.succeeded),
    (S.running, S.failed),
    (S.running, S.cancelled),
    (S.running, S.restarting),
    (S.running, S.pending),
    (S.restarting, S.scheduled),
    (S.restarting, S.running),
    (S.restarting, S.pending),
    (S.restarting, S.failed),
    (S.restarting, S.cancelled),
    (S.failed, S.restarting),
    # Suspended (off the cluster) from any status that waits for or holds hosts; resumed.
    (S.pending, S.suspended),
    (S.scheduled, S.suspended),
    (S.running, S.suspended),
    (S.restarting, S.suspended),
    (S.suspended, S.pending),
    (S.suspended, S.cancelled),
}


def test_transition_table_is_the_documented_lifecycle() -> None:
    legal = {(a, b) for a, targets in JOB_TRANSITIONS.items() for b in targets}
    assert legal == EXPECTED_LEGAL
    assert set(JOB_TRANSITIONS) == set(JobStatus)


def test_finished_jobs_stay_finished_except_a_failed_restart() -> None:
    assert not JOB_TRANSITIONS[S.succeeded]
    assert not JOB_TRANSITIONS[S.cancelled]
    assert JOB_TRANSITIONS[S.failed] == {S.restarting}


async def _job_in(api: Api, status: JobStatus) -> Job:
    async with api.session() as session:
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        job.status = status  # arrange directly; the transitions themselves are under test
        await session.commit()
        return job


@pytest.mark.parametrize(
    ("current", "target"),
    [pytest.param(a, b, id=f"{a.value}->{b.value}") for a, b in itertools.product(S, S)],
)
async def test_every_pair_on_a_real_job(
    quiet_api: Api, current: JobStatus, target: JobStatus
) -> None:
    api = quiet_api  # the job is arranged and moved directly: no pass may write it meanwhile
    job_id = (await _job_in(api, current)).id
    async with api.session() as session:
        job = await session.get_one(Job, job_id)
        if can_transition(current, target):
            await transition_job(session=session, job=job, to=target, reason="test")
            await session.commit()
        else:
            with pytest.raises(IllegalTransition) as caught:
                await transition_job(session=session, job=job, to=target, reason="test")
            assert caught.value.status_code == 409
            await session.rollback()

    async with api.session() as session:
        stored = await session.get_one(Job, job_id)
        events = (
            await session.scalars(
                select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == "status")
            )
        ).all()
        if can_transition(current, target):
            assert stored.status is target
            assert [(e.from_status, e.to_status, e.message) for e in events] == [
                (current.value, target.value, "test")
            ]
            assert (stored.finished_at is not None) == target.is_terminal
        else:
            assert stored.status is current
            assert events == []


def test_a_change_of_status_gives_its_columns_and_its_event_or_is_refused() -> None:
    """status_change, the one writer of a status, for loaded jobs and plain rows alike."""
    now = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)
    change = status_change(
        job_id=7, current=S.scheduled, started_at=None, to=S.running, reason="go", now=now
    )
    assert change.values == {
        "status": S.running,
        "reason": "go",
        "updated_at": now,
        "started_at": now,
    }
    event = change.event
    assert (event.job_id, event.kind, event.from_status, event.to_status, event.message) == (
        7,
        "status",
        "scheduled",
        "running",
        "go",
    )
    ended = status_change(
        job_id=7, current=S.running, started_at=now, to=S.failed, reason=None, now=now
    )
    assert ended.values == {
        "status": S.failed,
        "reason": None,
        "updated_at": now,
        "finished_at": now,
    }
    with pytest.raises(IllegalTransition, match="job 7 is succeeded; it cannot become running"):
        status_change(
            job_id=7, current=S.succeeded, started_at=now, to=S.running, reason=None, now=now
        )
