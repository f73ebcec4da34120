"""Submissions that arrive together are stored together.

Every change to jobs is a controller transaction, one at a time under the controller's lock
(backend.scheduling.controller). A burst of `POST /jobs` took one transaction per job, each
a few statements and a commit, each waiting for the one before: a thousand submissions took
a minute. Here a submission joins those already waiting, and the next transaction stores all
of them with one INSERT per table. Each keeps its own outcome: one refused (say its submitter
was removed from the project meanwhile) fails alone, and a transaction that fails as a whole
is tried again one submission at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.auth import Principal
from backend.jobs import service
from backend.jobs.models import Job
from backend.jobs.spec import JobSpec
from backend.scheduling.transaction import Transaction
from backend.teams import service as teams_service
from backend.teams.access import Access
from backend.teams.models import Project

log = logging.getLogger(__name__)

MAX_BATCH = 100  # submissions stored by one transaction (its statements stay short)

# Controller.apply for changes that take no capacity (a new job waits to be placed).
Apply = Callable[[Callable[[Transaction], Awaitable[list[Job]]]], Awaitable[list[Job]]]


def _future() -> asyncio.Future[Job]:
    return asyncio.get_running_loop().create_future()


@dataclass
class Submission:
    """A validated spec, who submits it and from where, and its job once stored."""

    spec: JobSpec
    principal: Principal
    access: Access
    source: str | None
    done: asyncio.Future[Job] = field(default_factory=_future)


async def store(tx: Transaction, *, submissions: list[Submission]) -> list[Job]:
    """Store the jobs of these submissions and their audit entries, in this transaction.
    Raises what the first refused one raises (the caller then tries them one by one). The
    jobs come back whole, their tasks with them: nothing is read again to answer."""
    session = tx.session
    projects: dict[tuple[str, str | None], Project] = {}
    jobs: list[Job] = []
    for submission in submissions:
        # Read again under the lock: the submitter may have lost the project since.
        key = (submission.principal.label, submission.spec.project)
        project = projects.get(key)
        if project is None:
            project = projects[key] = await teams_service.project_for_submit(
                session=session, access=submission.access, name=submission.spec.project
            )
        jobs.append(
            service.new_job(
                spec=submission.spec.model_copy(update={"project": project.name}),
                project_id=project.id,
                submitted_by=submission.principal.label,
            )
        )
    session.add_all(jobs)
    await session.flush()  # the jobs, then their tasks: a statement per table
    for job, submission in zip(jobs, submissions, strict=True):
        event = service.created_event(job)
        event.actor = submission.principal.label
        session.add(event)
        session.add(
            audit.new_entry(
                principal=submission.principal,
                source=submission.source,
                action=AuditAction.job_submit,
                project_id=job.project_id,
                job_id=job.id,
                detail={"name": submission.spec.name},
            )
        )
    await session.flush()
    return jobs


class Submissions:
    """Stores submissions in batches: whatever waits when a transaction can begin."""

    def __init__(self, apply: Apply) -> None:
        self._apply = apply
        self._waiting: list[Submission] = []
        self._storing: asyncio.Task[None] | None = None

    async def submit(
        self, *, spec: JobSpec, principal: Principal, access: Access, source: str | None
    ) -> Job:
        """Store a job (pending, in the project its spec names or the submitter's default)
        and return it once its transaction has committed."""
        submission = Submission(spec=spec, principal=principal, access=access, source=source)
        self._waiting.append(submission)
        if self._storing is None or self._storing.done():
            self._storing = asyncio.create_task(self._store_waiting(), name="submissions")
        # Shielded: a client that goes away does not cancel the others' transaction (its
        # own job is stored all the same, as it would have been once committed).
        return await asyncio.shield(submission.done)

    async def _store_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            try:
                await self._store(batch)
            except BaseException:  # cancelled with the server: nobody is left waiting forever
                for submission in batch:
                    if not submission.done.done():
                        submission.done.cancel()
                raise

    async def _store(self, batch: list[Submission]) -> None:
        try:
            jobs = await self._apply(partial(store, submissions=batch))
        except Exception as exc:
            if len(batch) == 1:
                batch[0].done.set_exception(exc)
                return
            log.info("storing %d submissions together failed; storing each alone", len(batch))
            for submission in batch:
                await self._store([submission])
            return
        for submission, job in zip(batch, jobs, strict=True):
            submission.done.set_result(job)
