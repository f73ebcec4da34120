"""Client coordinators that went quiet are detached; a job left without one for its
client_idle_timeout ends, so that no forgotten notebook holds its GPUs."""

from __future__ import annotations

import time
from datetime import datetime

from sqlalchemy import select

from agents.vocabulary import Strategy
from backend.clients.service import detach, has_client_coordinator
from backend.config import Settings
from backend.db import utcnow
from backend.jobs.models import Job, JobClient
from backend.jobs.states import JobStatus
from backend.scheduling.task_events import end_job
from backend.scheduling.transaction import Transaction

CHECK_SECONDS = 1.0  # at most this often: the times it compares are seconds apart


def describe_seconds(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


class IdleClients:
    def __init__(self, *, settings: Settings, started: datetime | None = None) -> None:
        self.settings = settings
        self._checked = -CHECK_SECONDS
        # A client is silent only since this server started (default: now): one that beat
        # at a server that has since restarted gets its full time to reach this one.
        self._up_since = started or utcnow()

    async def reconcile(self, tx: Transaction) -> None:
        if time.monotonic() - self._checked < CHECK_SECONDS:
            return
        self._checked = time.monotonic()
        rows = await tx.session.execute(
            select(Job, JobClient)
            .outerjoin(JobClient, JobClient.job_id == Job.id)
            .where(Job.status == JobStatus.running, Job.strategy == Strategy.parameter_server)
        )
        now = utcnow()
        lost_after = self.settings.client_lost_seconds
        for job, client in rows:
            if not has_client_coordinator(job):
                continue
            if client is not None and client.attached:
                silent = (now - max(client.seen_at, self._up_since)).total_seconds()
                if silent < lost_after:
                    continue
                await detach(
                    session=tx.session,
                    job=job,
                    client=client,
                    why=f"is gone: no heartbeat for {describe_seconds(silent)}",
                )
            idle_since = client.detached_at if client is not None else job.started_at
            if idle_since is None:
                continue
            timeout = job.job_spec.client_idle_timeout or self.settings.client_idle_timeout
            idle = (now - idle_since).total_seconds()
            if idle >= timeout:
                await end_job(
                    tx=tx,
                    job=job,
                    status=JobStatus.cancelled,
                    reason=f"no client attached for {describe_seconds(idle)} "
                    f"(client_idle_timeout {describe_seconds(timeout)})",
                )
