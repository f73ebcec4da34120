"""The Slurm backend's loop: submit what asks for Slurm, and mirror Slurm's view in Strata's.

One pass (`reconcile_once`, what the tests call) records and submits new Slurm jobs, reads
squeue (then the accounting, for jobs that left the queue) for the submitted ones, and:
* a pending Strata job shows Slurm's reason for the wait ("Slurm: Resources");
* a Strata job that has ended (cancelled, failed, succeeded) while its Slurm job is live has
  its Slurm job cancelled with scancel;
* a Slurm job that ended while its Strata job is active (cancelled, failed, timed out outside
  Strata) ends the Strata job with a reason that says so.
Level-triggered like the controller: a pass decides from what it reads, so a lost answer or a
restart of either side is repaired by the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.auth import TokenRegistry
from backend.config import Settings
from backend.db import utcnow
from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.slurm.commands import ACTIVE_STATES, SlurmCommands, SlurmError
from backend.slurm.job_changes import Apply, end_for_slurm, note_waiting
from backend.slurm.models import Phase, SlurmJob
from backend.slurm.outcome import SlurmView, ending, waiting_reason
from backend.slurm.submit import Submitter, server_url

log = logging.getLogger(__name__)

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
CANCEL_RESEND = timedelta(seconds=10)
# Slurm states in which the allocation's agents may join (the job's processes run).
AGENT_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING"}
)  # scancel again if the job is still live after this


def commands_from(settings: Settings) -> SlurmCommands:
    return SlurmCommands(
        bin_dir=settings.slurm_bin_dir,
        conf=settings.slurm_conf,
        timeout=settings.slurm_command_timeout_seconds,
        accounting=settings.slurm_accounting,
    )


class SlurmSync:
    """Submits the jobs that ask for Slurm and follows their Slurm jobs."""

    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        tokens: TokenRegistry,
        apply: Apply,
        commands: SlurmCommands | None = None,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self.settings = settings
        # Only the leading replica passes: two would both sbatch a job (backend.leadership).
        self.leading = leading
        self.sessions = sessions
        self.apply = apply
        self.commands = commands or commands_from(settings)
        self.submitter = Submitter(
            settings=settings,
            sessions=sessions,
            commands=self.commands,
            tokens=tokens,
            apply=apply,
        )
        self._wake = asyncio.Event()
        if settings.slurm_server_url is None and settings.host in LOOPBACK:
            log.warning(
                "STRATA_SLURM_SERVER_URL is unset: the agents in Slurm allocations are told to "
                "reach the server at %s, which only works where the compute nodes are this "
                "machine",
                server_url(settings),
            )
        # Passes never overlap: two could both find a record unsubmitted and both sbatch it.
        self._pass = asyncio.Lock()

    def wake(self) -> None:
        """Pass now (a job was submitted or cancelled) rather than at the next poll."""
        self._wake.set()

    async def run(self) -> None:
        period = self.settings.slurm_poll_seconds
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period * random.uniform(0.8, 1.2)):
                    await self._wake.wait()
            self._wake.clear()
            if not self.leading():
                continue
            try:
                await self.reconcile_once()
            except Exception:
                log.exception("Slurm pass failed")

    async def reconcile_once(self) -> None:
        """One pass: record, submit, follow."""
        async with self._pass:
            await self.submitter.record_new_jobs()
            await self.submitter.submit_recorded()
            await self.follow_submitted()

    async def follow_submitted(self) -> None:
        async with self.sessions() as session:
            records = list(
                await session.scalars(
                    select(SlurmJob).where(SlurmJob.phase == Phase.submitted).order_by(SlurmJob.id)
                )
            )
            if not records:
                return
            try:
                views = await self._views(records)
            except SlurmError as exc:
                # Slurm's controller is down or restarting: nothing is concluded from silence.
                log.warning("cannot read Slurm's queue: %s", exc.message)
                return
            statuses = dict(
                (
                    await session.execute(
                        select(Job.id, Job.status).where(Job.id.in_([r.job_id for r in records]))
                    )
                ).all()
            )
            for record in records:
                view = views[record.job_id]
                status = statuses.get(record.job_id)
                await self._follow(session, record, view, status)

    async def _views(self, records: list[SlurmJob]) -> dict[int, SlurmView]:
        """Slurm's view of each record's job: squeue, then the accounting for the rest."""
        queued = {
            q.job_id: q for q in await self.commands.queue(names=sorted({r.name for r in records}))
        }
        gone = [r.slurm_job_id for r in records if r.slurm_job_id not in queued]
        accounted = {a.job_id: a for a in await self.commands.accounted(sorted(filter(None, gone)))}
        views: dict[int, SlurmView] = {}
        for record in records:
            assert record.slurm_job_id is not None
            if (q := queued.get(record.slurm_job_id)) is not None:
                views[record.job_id] = SlurmView(q.job_id, q.state, q.reason, q.nodes)
            elif (a := accounted.get(record.slurm_job_id)) is not None:
                views[record.job_id] = SlurmView(a.job_id, a.state, a.detail, a.nodes, a.exit_code)
            else:
                views[record.job_id] = SlurmView(record.slurm_job_id, None)
        return views

    async def _follow(
        self,
        session: AsyncSession,
        record: SlurmJob,
        view: SlurmView,
        status: JobStatus | None,
    ) -> None:
        assert record.slurm_job_id is not None
        changed = (record.slurm_state, record.slurm_reason) != (view.state, view.reason or None)
        record.slurm_state, record.slurm_reason = view.state, view.reason or None
        record.nodes = view.nodes or record.nodes
        await session.commit()
        live = view.state in ACTIVE_STATES
        if live and (status is None or status.is_terminal):
            await self._cancel(session, record)
        elif live and status is JobStatus.pending and changed:
            # Only when Slurm's word changes: a placement reason the job got meanwhile (its
            # agents have joined) is not overwritten on every poll.
            await self.apply(
                functools.partial(
                    note_waiting,
                    job_id=record.job_id,
                    reason=waiting_reason(view),
                    slurm_job_id=record.slurm_job_id,
                ),
                frees_or_takes_capacity=False,
            )
        elif not live:
            if status is not None and not status.is_terminal:
                end = ending(view)
                log.info("job %d: %s", record.job_id, end.reason)
                await self.apply(
                    functools.partial(
                        end_for_slurm, job_id=record.job_id, status=end.status, reason=end.reason
                    )
                )
            # After the job: a record ended under a job still active would be submitted again.
            record.phase, record.ended_at = Phase.ended, utcnow()
            await session.commit()

    async def _cancel(self, session: AsyncSession, record: SlurmJob) -> None:
        """scancel the Slurm job of a Strata job that has ended (again if it lingers)."""
        now = utcnow()
        if record.cancel_sent_at is not None and now - record.cancel_sent_at < CANCEL_RESEND:
            return
        assert record.slurm_job_id is not None
        try:
            await self.commands.cancel(record.slurm_job_id)
        except SlurmError as exc:
            log.warning("job %d: scancel %s: %s", record.job_id, record.slurm_job_id, exc.message)
            return
        log.info("job %d: cancelled Slurm job %s", record.job_id, record.slurm_job_id)
        record.cancel_sent_at = now
        await session.commit()

    async def agent_refusal(self, job_id: int, name: str) -> str | None:
        """Why an agent with the job agent token of this job may not join now, if it may not:
        only while the job is active and its Slurm job runs, under a name of its allocation.
        Slurm's view is read again first when the record is behind (the agents of a job
        that has just started are often faster than the next poll)."""
        prefix = f"{self.settings.slurm_job_prefix}-{job_id}-"
        if not name.startswith(prefix) or len(name) == len(prefix):
            return (
                f"an agent of job {job_id}'s Slurm allocation is named {prefix}<node>, not {name!r}"
            )
        refusal = await self._agent_refusal(job_id)
        if refusal is not None and refusal.startswith("Slurm job"):
            await self.reconcile_once()
            refusal = await self._agent_refusal(job_id)
        return refusal

    async def _agent_refusal(self, job_id: int) -> str | None:
        async with self.sessions() as session:
            row = (
                await session.execute(
                    select(SlurmJob, Job.status)
                    .join(Job, Job.id == SlurmJob.job_id)
                    .where(SlurmJob.job_id == job_id)
                )
            ).first()
        if row is None:
            return f"job {job_id} has no Slurm job"
        record, status = row
        if status.is_terminal:
            return f"job {job_id} is {status.value}: its allocation's agents may not join"
        if record.phase is not Phase.submitted or record.slurm_state not in AGENT_STATES:
            return (
                f"Slurm job {record.slurm_job_id} of job {job_id} is not running "
                f"(Slurm says {record.slurm_state or 'nothing yet'})"
            )
        return None
