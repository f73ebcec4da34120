"""The sweep runner: a loop service of the leader that keeps each running sweep's trials going.

One iteration (`run_once`), for every sweep not yet ended, in this order:

1. follow each running trial: the objective's new intermediate values (from the job's stored
   metric points) are reported to the pruner, and a trial it prunes has its job cancelled at
   once with the reason; a trial whose job ended gets its result;
2. tell Optuna how ended trials ended (also those that ended before a restart);
3. a sweep stopped by request, with more failed trials than its budget allows, or past its
   wall time cancels its running trials and ends;
4. start trials up to `budget.parallel`, until `budget.trials` were asked for: first a trial
   Optuna was asked for but whose job was never written (the server died in between), then
   new ones;
5. a sweep whose budget is spent and whose trials all ended has succeeded.

It runs on its period and whenever the ingest stores an epoch's end of a running trial.

Optuna's storage is synchronous: its calls run on a worker thread. Every write of the
runner's goes through the controller (`apply`), under its lock and fenced by the lease. The
Optuna trial is asked for before its job is written, so that a crash between the two leaves an
Optuna trial with no job, which step 4 starts after the restart: none is lost or run twice,
and the budget counts Optuna's trials.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.protocol import MetricPoint as WirePoint
from backend.db import utcnow
from backend.errors import InvalidInput
from backend.jobs.models import Job
from backend.jobs.spec import MAX_TAGS
from backend.jobs.states import JobStatus
from backend.leadership.lease import NotLeader
from backend.scheduling import new_jobs
from backend.scheduling import sweep_reads as reads
from backend.scheduling.task_events import end_job
from backend.scheduling.transaction import Transaction
from backend.sweeps.models import Sweep, SweepTrial
from backend.sweeps.service import best_trial
from backend.sweeps.spec import SweepSpec
from backend.sweeps.states import SweepStatus, TrialStatus

if TYPE_CHECKING:
    from backend.sweeps.study import SweepStudy

log = logging.getLogger(__name__)

Apply = Callable[..., Awaitable[Any]]  # Controller.apply


class SweepRunner:
    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        apply: Apply,
        database_url: str,
        leading: Callable[[], bool],
        poll_seconds: float,
    ) -> None:
        self.sessions = sessions
        self.apply = apply
        self.database_url = database_url
        self.leading = leading
        self.poll_seconds = poll_seconds
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._studies: dict[int, SweepStudy] = {}
        self._followed: dict[int, str] = {}  # running trials' jobs: their objective
        self._storage: Any = None

    def wake(self) -> None:
        self._wake.set()

    def points_stored(self, job_id: int, points: Sequence[WirePoint]) -> None:
        """The ingest stored a job's points: an epoch's end of a running trial wakes the runner,
        so that the pruner judges it now rather than at the next poll."""
        metric = self._followed.get(job_id)
        if metric is not None and any(p.name in (metric, reads.EPOCH) for p in points):
            self.wake()

    async def run(self) -> None:
        failures = 0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_seconds):
                    await self._wake.wait()
            self._wake.clear()
            if not self.leading():
                continue
            try:
                await self.run_once()
                failures = 0
            except Exception:
                failures += 1
                log.exception("a sweep iteration failed (%d in a row)", failures)
                await asyncio.sleep(min(30.0, self.poll_seconds * 2**failures))

    async def run_once(self) -> None:
        async with self._lock:  # one iteration at a time (the loop's, a test's)
            sweeps = await reads.unfinished_sweeps(self.sessions)
            if not sweeps and not self._followed:
                return  # nothing runs: one query per period, and nothing to follow
            for sweep in sweeps:
                try:
                    await self._advance(sweep)
                except NotLeader:
                    raise
                except Exception:  # one sweep's trouble is not the others'
                    log.exception("sweep %d: an iteration failed", sweep.id)
            self._followed = {  # as the iteration left them, its new trials too
                trial.job_id: sweep.sweep_spec.objective.metric
                for sweep in await reads.unfinished_sweeps(self.sessions)
                for trial in sweep.trials
                if trial.status is TrialStatus.running
            }

    # --- one sweep --------------------------------------------------------------------

    async def _advance(self, sweep: Sweep) -> None:
        spec = sweep.sweep_spec
        study = await self._study(sweep, spec)
        jobs = await reads.job_statuses(
            self.sessions, [t.job_id for t in sweep.trials if not t.status.is_terminal]
        )
        for trial in sweep.trials:
            if trial.status is TrialStatus.running:
                await self._follow(sweep, spec, study, trial, jobs[trial.job_id])
        sweep = await reads.sweep_with_trials(self.sessions, sweep.id)
        await self._tell_ended(study, sweep.trials)
        running = [t for t in sweep.trials if t.status is TrialStatus.running]
        ending = self._why_it_ends(sweep, spec) if sweep.status is SweepStatus.running else None
        if sweep.status is SweepStatus.stopping:
            ending = SweepStatus.stopped, sweep.reason or "stopped by request"
        if ending is not None:
            for trial in running:
                await self._end_trial(trial, TrialStatus.stopped, "the sweep stopped", cancel=True)
            await self._tell_ended(
                study, (await reads.sweep_with_trials(self.sessions, sweep.id)).trials, ending=True
            )
            await self._set_status(sweep, *ending)
            return
        await self._start_trials(sweep, spec, study, len(running))
        sweep = await reads.sweep_with_trials(self.sessions, sweep.id)
        counted = await asyncio.to_thread(study.counted)
        if counted >= spec.budget.trials and all(t.status.is_terminal for t in sweep.trials):
            await self._finish(sweep, spec)

    def _why_it_ends(self, sweep: Sweep, spec: SweepSpec) -> tuple[SweepStatus, str] | None:
        failed = [t for t in sweep.trials if t.status is TrialStatus.failed]
        limit = spec.budget.max_failed
        if limit is not None and len(failed) > limit:
            last = max(failed, key=lambda t: t.number)
            return SweepStatus.failed, (
                f"too many trials failed: {len(failed)}, over budget.max_failed {limit}; "
                f"the last, trial {last.number}: {last.reason}"
            )
        wall = spec.budget.wall_time
        if wall is not None and utcnow() - sweep.created_at > timedelta(seconds=wall):
            return SweepStatus.stopped, f"its wall time of {wall:g} s ran out"
        return None

    async def _finish(self, sweep: Sweep, spec: SweepSpec) -> None:
        best = best_trial(sweep.trials, spec.objective.direction)
        if best is None:
            await self._set_status(sweep, SweepStatus.failed, "no trial succeeded")
            return
        params = ", ".join(f"{k}={v}" for k, v in best.params.items())
        reason = f"best: trial {best.number}, {spec.objective.metric} {best.value:.6g} ({params})"
        await self._set_status(sweep, SweepStatus.succeeded, reason)

    # --- a running trial -----------------------------------------------------------------

    async def _follow(
        self, sweep: Sweep, spec: SweepSpec, study: SweepStudy, trial: SweepTrial, job: JobStatus
    ) -> None:
        """Report the trial's new intermediate values, prune it if the pruner says so, and
        record its result once its job ended."""
        points = await reads.objective_points(self.sessions, trial.job_id, spec)
        curve = [list(p) for p in trial.curve or []]
        reported = int(curve[-1][0]) if curve else 0
        unit = "epoch" if spec.early_stopping.resource == "epochs" else "step"
        for resource, value in reads.intermediate(points, after=reported):
            # A trial that ran to its end (its job ended, or it reached the full resource) is
            # not judged: what it reported is its result.
            full = spec.early_stopping.max_resource
            judge = not job.is_terminal and (full is None or resource < full)
            prune = await asyncio.to_thread(
                study.report, trial.number, resource, value, judge=judge
            )
            curve.append([resource, value])
            if prune:
                rule = await asyncio.to_thread(study.prune_rule, trial.number)
                reason = f"pruned at {unit} {resource}: {rule}"
                await self._end_trial(trial, TrialStatus.pruned, reason, curve=curve, cancel=True)
                return
        final = max(points, key=lambda p: p.order).value if points else None
        full = spec.early_stopping.max_resource
        if not job.is_terminal and full is not None and curve and curve[-1][0] >= full:
            # It reached the full resource: its result is known, and its slot is free for the
            # next trial while its process finishes (checkpoint, exit) on its own.
            value = float(curve[-1][1])
            await self._end_trial(trial, TrialStatus.succeeded, None, curve=curve, value=value)
            return
        if not job.is_terminal:
            if len(curve) != len(trial.curve or []):
                await self._end_trial(trial, None, None, curve=curve)
            return
        metric = spec.objective.metric
        if job is JobStatus.succeeded and final is not None:
            await self._end_trial(trial, TrialStatus.succeeded, None, curve=curve, value=final)
            return
        reason = (
            f"its job never reported {metric}"
            if job is JobStatus.succeeded
            else f"its job {job}: {await reads.job_reason(self.sessions, trial.job_id)}"
        )
        await self._end_trial(trial, TrialStatus.failed, reason, curve=curve)

    async def _end_trial(
        self,
        trial: SweepTrial,
        status: TrialStatus | None,
        reason: str | None,
        *,
        curve: list[list[float]] | None = None,
        value: float | None = None,
        cancel: bool = False,
    ) -> None:
        """Record the trial's curve and, with a status, its end; `cancel` ends its job too.
        Only a trial still running is changed: one already ended stays as it ended."""

        async def change(tx: Transaction) -> None:
            values: dict[str, Any] = {}
            if curve is not None:
                values["curve"] = curve
            if status is not None:
                values |= {"status": status, "reason": reason, "value": value}
                values["finished_at"] = utcnow()
            done = await tx.session.execute(
                update(SweepTrial)
                .where(SweepTrial.id == trial.id, SweepTrial.status == TrialStatus.running)
                .values(values)
            )
            if not done.rowcount or not cancel:  # type: ignore[attr-defined]
                return
            job = await tx.session.get(Job, trial.job_id)
            if job is not None and not job.status.is_terminal:
                await end_job(tx=tx, job=job, status=JobStatus.cancelled, reason=reason or "")

        await self.apply(change, frees_or_takes_capacity=cancel)

    async def _tell_ended(
        self, study: SweepStudy, trials: Sequence[SweepTrial], *, ending: bool = False
    ) -> None:
        """Tell Optuna how ended trials ended; as the sweep ends, also of a trial it was asked
        for whose job was never written (it fails: it will never run)."""
        running = await asyncio.to_thread(study.running)
        for trial in trials:
            if trial.status.is_terminal and trial.number in running:
                await asyncio.to_thread(study.tell, trial.number, trial.status, trial.value)
        if ending:
            for number in running - {trial.number for trial in trials}:
                await asyncio.to_thread(study.tell, number, TrialStatus.failed)

    # --- new trials ----------------------------------------------------------------------

    async def _start_trials(
        self, sweep: Sweep, spec: SweepSpec, study: SweepStudy, running: int
    ) -> None:
        known = {t.number for t in sweep.trials}
        # Asked for before a crash, its job never written: started now, with its parameters.
        for number in sorted(await asyncio.to_thread(study.running) - known):
            if running < spec.budget.parallel:
                params = await asyncio.to_thread(study.params, number)
                if not await self._start(sweep, spec, study, number, params):
                    return
                running += 1
        while running < spec.budget.parallel:
            if await asyncio.to_thread(study.counted) >= spec.budget.trials:
                return
            asked = await asyncio.to_thread(study.ask)
            if not await self._start(sweep, spec, study, asked.number, asked.params):
                return
            running += 1

    async def _start(
        self,
        sweep: Sweep,
        spec: SweepSpec,
        study: SweepStudy,
        number: int,
        params: dict[str, Any],
    ) -> bool:
        """Write the trial's job and its row together; False if the sweep no longer runs."""
        try:
            job_spec = spec.job_for(params)
        except InvalidInput as invalid:
            await asyncio.to_thread(study.tell, number, TrialStatus.failed)
            reason = f"trial {number}'s job spec is invalid with {params}: {invalid.message}"
            await self._set_status(sweep, SweepStatus.stopping, reason)
            return False
        tags = job_spec.tags if len(job_spec.tags) >= MAX_TAGS else [*job_spec.tags, sweep.tag]
        project = await reads.project_name(self.sessions, sweep.project_id)
        trial_spec = job_spec.model_copy(
            update={"name": f"{job_spec.name[:50]}-t{number}", "tags": tags, "project": project}
        )

        new = new_jobs.NewJob(
            spec=trial_spec,
            project_id=sweep.project_id,
            submitted_by=sweep.submitted_by,
            actor=f"sweep {sweep.id}",
        )
        change = functools.partial(
            write_trial, sweep_id=sweep.id, number=number, params=params, job=new
        )
        started: bool = await self.apply(change, frees_or_takes_capacity=False)
        return started

    # --- reads and the sweep's own row ------------------------------------------------------

    async def _set_status(self, sweep: Sweep, status: SweepStatus, reason: str | None) -> bool:
        """Move the sweep on from the status it was read in; False if it changed meanwhile
        (a stop request): the next iteration reads it again."""

        async def change(tx: Transaction) -> bool:
            now = utcnow()
            values: dict[str, Any] = {"status": status, "reason": reason, "updated_at": now}
            if status.is_terminal:
                values["finished_at"] = now
            done = await tx.session.execute(
                update(Sweep)
                .where(Sweep.id == sweep.id, Sweep.status == sweep.status)
                .values(values)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

        changed: bool = await self.apply(change, frees_or_takes_capacity=False)
        return changed

    async def _study(self, sweep: Sweep, spec: SweepSpec) -> SweepStudy:
        study = self._studies.get(sweep.id)
        if study is None:
            from backend.sweeps import study as studies  # Optuna, once there is a sweep

            if self._storage is None:
                self._storage = await asyncio.to_thread(studies.open_storage, self.database_url)
            study = await asyncio.to_thread(
                studies.SweepStudy, storage=self._storage, name=sweep.study_name, spec=spec
            )
            self._studies[sweep.id] = study
        return study


async def write_trial(
    tx: Transaction, *, sweep_id: int, number: int, params: dict[str, Any], job: new_jobs.NewJob
) -> bool:
    """Write a trial's job and its row together, once; False if the sweep no longer runs (a
    stop was acknowledged meanwhile: no trial starts after it)."""
    session = tx.session
    status = await session.scalar(select(Sweep.status).where(Sweep.id == sweep_id))
    if status is not SweepStatus.running:
        return False
    exists = await session.scalar(
        select(SweepTrial.id).where(SweepTrial.sweep_id == sweep_id, SweepTrial.number == number)
    )
    if exists is not None:
        return True
    [written] = await new_jobs.insert_jobs(session=session, jobs=[job])
    session.add(
        SweepTrial(
            sweep_id=sweep_id,
            number=number,
            job_id=written.id,
            params=params,
            status=TrialStatus.running,
            curve=[],
        )
    )
    await session.flush()
    return True
