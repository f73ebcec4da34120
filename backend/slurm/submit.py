"""Submitting jobs to Slurm without ever submitting one twice.

A job that asks for Slurm is first recorded (a slurm_jobs row, committed); only then does
sbatch run. Before every sbatch the queue is searched for the record's job name and marker
(its --comment): a record whose sbatch ran but whose answer was lost (a crash, a timeout)
finds its Slurm job there and adopts it instead of submitting again.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Iterable

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.auth import TokenRegistry
from backend.config import Settings
from backend.db import utcnow
from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.slurm.commands import QueuedJob, SlurmCommands, SlurmError, SlurmUnavailable
from backend.slurm.job_changes import Apply, end_for_slurm, note_waiting
from backend.slurm.models import Phase, SlurmJob
from backend.slurm.script import ShapeError, batch_script, job_name, sbatch_options
from backend.teams.models import Project

log = logging.getLogger(__name__)


async def project_account(session: AsyncSession, job: Job) -> str | None:
    """The Slurm account of the job's project (None when it has none)."""
    account: str | None = await session.scalar(
        select(Project.slurm_account).where(Project.id == job.project_id)
    )
    return account


def server_url(settings: Settings) -> str:
    """Where the job-bound agents reach the server."""
    if settings.slurm_server_url:
        return settings.slurm_server_url.rstrip("/")
    scheme = "https" if settings.tls_certfile is not None else "http"
    return f"{scheme}://{settings.host}:{settings.port}"


class Submitter:
    """Records the jobs that ask for Slurm, and submits the recorded ones."""

    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        commands: SlurmCommands,
        tokens: TokenRegistry,
        apply: Apply,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.commands = commands
        self.tokens = tokens
        self.apply = apply
        self._native: set[int] = set()  # pending jobs seen not to ask for Slurm

    async def record_new_jobs(self) -> int:
        """Record every pending job that asks for Slurm and has no live Slurm job: new jobs,
        and jobs restarted by request after their Slurm job ended (a new submission)."""
        async with self.sessions() as session:
            rows = (
                await session.execute(
                    select(Job.id, Job.spec, SlurmJob)
                    .outerjoin(SlurmJob, SlurmJob.job_id == Job.id)
                    .where(
                        Job.status == JobStatus.pending,
                        or_(SlurmJob.id.is_(None), SlurmJob.phase == Phase.ended),
                    )
                    .order_by(Job.id)
                )
            ).all()
            self._native &= {job_id for job_id, _, _ in rows}
            recorded = 0
            for job_id, spec, ended in rows:
                if job_id in self._native:
                    continue
                if not spec.get("slurm"):
                    self._native.add(job_id)
                    continue
                record = ended or SlurmJob(job_id=job_id, name=job_name(self.settings, job_id))
                record.marker = f"strata job {job_id} record {secrets.token_hex(8)}"
                record.phase = Phase.recorded
                record.slurm_job_id = record.slurm_state = record.slurm_reason = None
                record.nodes = record.submitted_at = None
                record.cancel_sent_at = record.ended_at = None
                record.submit_tries = 0
                record.recorded_at = utcnow()
                session.add(record)
                recorded += 1
            await session.commit()
        return recorded

    async def submit_recorded(self) -> None:
        """sbatch every recorded job, unless the queue shows it was submitted already."""
        async with self.sessions() as session:
            records = list(
                await session.scalars(
                    select(SlurmJob).where(SlurmJob.phase == Phase.recorded).order_by(SlurmJob.id)
                )
            )
            if not records:
                return
            try:
                queued = await self.commands.queue(names=sorted({r.name for r in records}))
            except SlurmError as exc:
                log.warning("cannot search Slurm's queue before submitting: %s", exc.message)
                return
            for record in records:
                await self._submit(session, record, queued)

    async def _submit(
        self, session: AsyncSession, record: SlurmJob, queued: Iterable[QueuedJob]
    ) -> None:
        found = next((q for q in queued if q.comment == record.marker), None)
        if found is not None:
            log.info("job %d: adopting Slurm job %s, submitted before", record.job_id, found.job_id)
            await self._submitted(session, record, found.job_id)
            return
        job = await session.get(Job, record.job_id)
        if job is None or job.status is not JobStatus.pending:
            # Cancelled (or gone) before it reached Slurm: there is nothing to submit.
            record.phase, record.ended_at = Phase.ended, utcnow()
            await session.commit()
            return
        spec = job.job_spec
        try:
            options = sbatch_options(
                settings=self.settings,
                job_id=job.id,
                spec=spec,
                name=record.name,
                marker=record.marker,
                project_account=await project_account(session, job),
            )
        except ShapeError as exc:
            await self._refused(session, record, str(exc))
            return
        script = batch_script(
            settings=self.settings, job_id=job.id, server_url=server_url(self.settings)
        )
        # Committed before sbatch runs: from here on, a restart searches before submitting.
        record.submit_tries += 1
        await session.commit()
        env = {
            "STRATA_AGENT_TOKEN": self.tokens.job_agent_token(job.id),
            "STRATA_SERVER": server_url(self.settings),
        }
        try:
            slurm_job_id = await self.commands.submit(script, options, env=env)
        except SlurmUnavailable as exc:
            log.warning("job %d: sbatch did not answer (%s); trying again", job.id, exc.message)
            return
        except SlurmError as exc:
            await self._refused(session, record, exc.message)
            return
        log.info("job %d: submitted as Slurm job %s", job.id, slurm_job_id)
        await self._submitted(session, record, slurm_job_id)

    async def _submitted(self, session: AsyncSession, record: SlurmJob, slurm_job_id: str) -> None:
        record.slurm_job_id = slurm_job_id
        record.phase, record.submitted_at = Phase.submitted, utcnow()
        await session.commit()
        await self.apply(
            functools.partial(
                note_waiting,
                job_id=record.job_id,
                reason=f"Slurm: submitted as job {slurm_job_id}",
                slurm_job_id=slurm_job_id,
            ),
            frees_or_takes_capacity=False,
        )

    async def _refused(self, session: AsyncSession, record: SlurmJob, message: str) -> None:
        log.info("job %d: Slurm refused it: %s", record.job_id, message)
        # The job first: a record ended under a job still pending would be submitted again.
        await self.apply(
            functools.partial(
                end_for_slurm,
                job_id=record.job_id,
                status=JobStatus.failed,
                reason=f"Slurm refused the job: {message}",
            )
        )
        record.phase, record.ended_at = Phase.ended, utcnow()
        await session.commit()
