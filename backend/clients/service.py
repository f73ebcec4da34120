"""Attaching the client coordinator of a job, its heartbeats and its detaching; and what a
pass finds of clients gone quiet. Services flush, never commit: the caller's transaction
(the controller's) does."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from agents.vocabulary import Role, format_task_name
from backend.db import utcnow
from backend.errors import Conflict, NotFound
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Job, JobClient
from backend.jobs.states import JobStatus

# The task a client coordinator is, to the runtime channel, the metrics and the checkpoints:
# the job's chief, its attempt the client's session number.
CLIENT_TASK = format_task_name(Role.chief, 0)


def has_client_coordinator(job: Job) -> bool:
    return job.job_spec.coordinator == "client"


def _since(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _describe(client: JobClient) -> str:
    who = f"{client.actor} " if client.actor else ""
    return f"client {client.session} ({who}on {client.host}, pid {client.pid})"


def _event_data(client: JobClient) -> dict[str, object]:
    """What a `client` event records of the client, as it is after the change."""
    return {
        "session": client.session,
        "host": client.host,
        "pid": client.pid,
        "attached": client.attached,
    }


async def client_job(session: AsyncSession, job_id: int) -> Job:
    job = await session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    if not has_client_coordinator(job):
        raise Conflict(
            f"job {job_id}'s coordinator is its chief task; a client attaches only to a "
            "parameter_server job submitted with coordinator: client"
        )
    return job


async def attach(
    *,
    session: AsyncSession,
    job_id: int,
    host: str,
    pid: int,
    actor: str | None,
    take_over: bool,
) -> JobClient:
    """Makes the caller the job's coordinator: a new session. Refused while another client
    is attached, unless `take_over`; and until the job's workers and ps serve."""
    job = await client_job(session, job_id)
    if job.status is not JobStatus.running:
        raise Conflict(
            f"job {job_id} is {job.status.value}: a client attaches while its workers and ps "
            "serve (running)"
        )
    client = await session.get(JobClient, job_id)
    now = utcnow()
    taken_from = None
    if client is not None and client.attached:
        if not take_over:
            raise Conflict(
                f"job {job_id}'s coordinator is {_describe(client)}, attached since "
                f"{_since(client.attached_at)}; connect with take_over=True to take it over"
            )
        taken_from = _describe(client)
    if client is None:
        client = JobClient(job_id=job_id, session=0)
        session.add(client)
    client.session += 1
    client.host, client.pid, client.actor = host, pid, actor
    client.attached_at = client.seen_at = now
    client.detached_at = None
    message = f"{_describe(client)} attached as the coordinator"
    if taken_from is not None:
        message += f", taking over from {taken_from}"
    await record_event(
        session=session,
        job=job,
        kind=EventKind.client,
        message=message,
        task=CLIENT_TASK,
        data=_event_data(client),
    )
    return client


async def heartbeat(*, session: AsyncSession, job_id: int, number: int) -> JobClient:
    """The client of session `number` is alive. One found gone (a laptop asleep, a network
    cut longer than STRATA_CLIENT_LOST_SECONDS) is attached again, if no other client took
    its place and the job still runs; else a Conflict says why not."""
    job = await client_job(session, job_id)
    client = await session.get(JobClient, job_id)
    if client is None or not 1 <= number <= client.session:
        raise NotFound(f"job {job_id} has no client session {number}")
    if client.session != number:
        raise Conflict(
            f"client session {number} of job {job_id} was taken over by {_describe(client)}"
        )
    if not client.attached:
        if job.status is not JobStatus.running:
            raise Conflict(
                f"client session {number} of job {job_id} is detached: the job is "
                f"{job.status.value}"
            )
        client.detached_at = None
        await record_event(
            session=session,
            job=job,
            kind=EventKind.client,
            message=f"{_describe(client)} is back as the coordinator",
            task=CLIENT_TASK,
            data=_event_data(client),
        )
    client.seen_at = utcnow()
    return client


async def detach(*, session: AsyncSession, job: Job, client: JobClient, why: str) -> None:
    """Ends the client's attachment (its detach, or a pass that found it gone)."""
    client.detached_at = utcnow()
    await record_event(
        session=session,
        job=job,
        kind=EventKind.client,
        message=f"{_describe(client)} {why}",
        task=CLIENT_TASK,
        data=_event_data(client),
    )


async def detach_session(*, session: AsyncSession, job_id: int, number: int) -> None:
    """The client's own detach; nothing when that session is over already."""
    job = await client_job(session, job_id)
    client = await session.get(JobClient, job_id)
    if client is not None and client.session == number and client.attached:
        await detach(session=session, job=job, client=client, why="detached")
