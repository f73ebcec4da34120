"""Job submissions, written together: those that arrive while the controller is busy go
into its next transaction as one batch, a few many-row INSERTs for all of them.

A submission is a change like any other (Controller.apply, under its lock); taking a thousand
of them one transaction each held that lock for longer than placing the jobs did. Each caller
is answered once the batch holding its job has committed, with its own job or its own error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.auth import Principal
from backend.errors import Forbidden, NotFound
from backend.jobs.schemas import JobRead
from backend.jobs.spec import JobSpec
from backend.scheduling import new_jobs
from backend.scheduling.transaction import Transaction
from backend.teams import service as teams_service
from backend.teams.access import Access
from backend.teams.models import Project

log = logging.getLogger(__name__)
T = TypeVar("T")

# The most submissions one transaction writes: it holds the controller's lock meanwhile.
BATCH = 32
# While other submissions are still being checked (`arriving`), a batch waits up to this
# long for them before it asks for the lock, so that a burst from a few clients makes full
# batches rather than a transaction per submission or two. A lone submission does not wait.
GATHER_SECONDS = 0.01

Apply = Callable[[Callable[[Transaction], Awaitable[T]]], Awaitable[T]]


@dataclass(eq=False)
class Submission:
    """A validated job spec and who submits it from where; `answer` gets the stored job."""

    spec: JobSpec
    access: Access
    principal: Principal
    source: str | None
    answer: asyncio.Future[JobRead] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class JobIntake:
    def __init__(self, *, apply: Apply[dict[Submission, JobRead | Exception]]) -> None:
        self._apply = apply  # Controller.apply, which never frees or takes capacity here
        self._waiting: list[Submission] = []
        self._writer: asyncio.Task[None] | None = None
        self._arriving = 0  # submissions being checked before they are handed in
        self._changed = asyncio.Event()  # one was handed in, or a request's checks ended

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Around a request's own checks of a submission, before `submit`: a batch about to
        be written waits a little for it."""
        self._arriving += 1
        try:
            yield
        finally:
            self._arriving -= 1
            self._changed.set()

    async def submit(
        self, spec: JobSpec, *, access: Access, principal: Principal, source: str | None
    ) -> JobRead:
        """Store the job as pending in the project its spec names (teams_service.
        project_for_submit says which and who may), once a transaction has written it."""
        submission = Submission(spec=spec, access=access, principal=principal, source=source)
        self._waiting.append(submission)
        self._changed.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_waiting(), name="job intake")
        # A caller that goes away before its batch is taken leaves nothing written (its
        # answer is cancelled, and a cancelled submission is not taken).
        return await submission.answer

    async def _write_waiting(self) -> None:
        self._changed = asyncio.Event()  # of this loop (an app may serve several, in tests)
        while self._waiting:
            await self._gather()
            taken, answers = await self._write_batch()
            for submission in taken:
                answer = answers[submission]
                if submission.answer.done():  # its caller went away meanwhile
                    continue
                if isinstance(answer, Exception):
                    submission.answer.set_exception(answer)
                else:
                    submission.answer.set_result(answer)

    async def _gather(self) -> None:
        """Up to GATHER_SECONDS, while requests still check submissions (and a batch has room)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GATHER_SECONDS):
                while self._arriving and len(self._waiting) < BATCH:
                    self._changed.clear()
                    await self._changed.wait()

    async def _write_batch(self) -> tuple[list[Submission], dict[Submission, JobRead | Exception]]:
        taken: list[Submission] = []

        async def write(tx: Transaction) -> dict[Submission, JobRead | Exception]:
            # Taken once the lock is held: everything that arrived while waiting for it.
            # Applied again after a stale read, the same batch is written again.
            if not taken:
                taken.extend(s for s in self._waiting[:BATCH] if not s.answer.done())
                del self._waiting[:BATCH]
            return await write_jobs(tx, taken)

        try:
            return taken, await self._apply(write)
        except SQLAlchemyError:
            # The database refused the batch, and nothing of it was committed: one
            # submission's failure must not be the others', so each alone, then.
            log.exception("writing %d job submissions together failed", len(taken))
            answers: dict[Submission, JobRead | Exception] = {}
            for submission in taken:
                answers |= await self._write_alone(submission)
            return taken, answers
        except Exception as error:
            # Anything else may have come after the commit: written again, the jobs would
            # be there twice. Each caller gets the error, as a lone submission would.
            log.exception("writing %d job submissions together failed", len(taken))
            return taken, dict.fromkeys(taken, error)

    async def _write_alone(self, submission: Submission) -> dict[Submission, JobRead | Exception]:
        try:
            return await self._apply(lambda tx: write_jobs(tx, [submission]))
        except Exception as error:
            return {submission: error}


async def write_jobs(
    tx: Transaction, submissions: list[Submission]
) -> dict[Submission, JobRead | Exception]:
    """Each submission's stored job, or the error that refused it (its project gone, or it
    no longer a member), written in a many-row INSERT per table for all of them."""
    session = tx.session
    answers: dict[Submission, JobRead | Exception] = {}
    projects: dict[tuple[str | None, int | None], Project | None] = {}  # submit_target's
    accepted: list[tuple[Submission, new_jobs.NewJob]] = []
    for submission in submissions:
        spec, access = submission.spec, submission.access
        # Checked again under the lock: a project may have gone since the request's check.
        key = (spec.project, access.principal.user_id)
        if key not in projects:
            projects[key] = await teams_service.submit_target(
                session=session, user_id=key[1], name=key[0]
            )
        try:
            project = teams_service.check_may_submit(
                access=access, project=projects[key], name=spec.project
            )
        except (NotFound, Forbidden) as refused:
            answers[submission] = refused
            continue
        label = submission.principal.label
        accepted.append(
            (
                submission,
                new_jobs.NewJob(
                    spec=spec.model_copy(update={"project": project.name}),
                    project_id=project.id,
                    submitted_by=label,
                    actor=label,
                ),
            )
        )
    jobs = await new_jobs.insert_jobs(session=session, jobs=[new for _, new in accepted])
    await audit.insert_entries(
        session=session,
        entries=[
            audit.entry_values(
                principal=submission.principal,
                source=submission.source,
                action=AuditAction.job_submit,
                project_id=job.project_id,
                job_id=job.id,
                detail={"name": job.name},
            )
            for (submission, _), job in zip(accepted, jobs, strict=True)
        ],
    )
    answers.update((submission, job) for (submission, _), job in zip(accepted, jobs, strict=True))
    return answers
