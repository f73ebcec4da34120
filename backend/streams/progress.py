"""Where each running job's training is: the latest `Progress` of each of its runtimes, kept in
memory (never in a table: it changes every second for every job), with the step rate and the
time since the step last moved, for `JobRead.progress` and hang detection.

A task's report replaces the previous one of its attempt; an attempt newer than the one kept
replaces it, and an older one is ignored (a late frame of a stopped attempt). A job's progress
is its most advanced training task's. The quiet clock (since the step last moved) restarts
whenever a report shows the step moved, a busy phase began or ended, or a new attempt began;
a task whose fit returned (`training` false) is not watched.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agents.protocol import Progress
from backend.jobs.schemas import JobProgress

__all__ = ["ProgressBoard", "Quiet"]

RATE_WINDOW = 60.0  # seconds of samples the step rate is taken over
STALE_SAMPLE = 3.0  # seconds without a new step after which the rate counts up to now
INTERVALS_KEPT = 30  # recent seconds-per-step samples, for the median step time


@dataclass
class _Task:
    attempt: int
    report: Progress
    quiet_since: float  # monotonic: the step last moved, or a phase began or ended
    advanced_at: datetime  # wall time of the same, for the API
    samples: deque[tuple[float, int]] = field(default_factory=deque)  # (monotonic, step)
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=INTERVALS_KEPT))


@dataclass(frozen=True)
class Quiet:
    """A job whose watched tasks' steps have all stood still for `seconds`."""

    seconds: float
    step: int
    median_step_seconds: float | None  # recent seconds per step, None until known
    busy: str | None  # a phase one of its tasks is in (not a hang while it lasts)
    tasks: tuple[str, ...]  # the watched tasks


class ProgressBoard:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._jobs: dict[int, dict[str, _Task]] = {}

    def note(self, job_id: int, task: str, attempt: int, report: Progress) -> None:
        now = self._clock()
        tasks = self._jobs.setdefault(job_id, {})
        kept = tasks.get(task)
        if kept is None or attempt > kept.attempt:
            kept = tasks[task] = _Task(attempt, report, now, self._wall())
            kept.samples.append((now, report.step))
            return
        if attempt < kept.attempt:
            return
        previous, kept.report = kept.report, report
        moved = report.step > previous.step
        if moved or report.busy != previous.busy or report.training != previous.training:
            kept.quiet_since = now
        if moved:
            kept.advanced_at = self._wall()
            last_at, last_step = kept.samples[-1] if kept.samples else (now, previous.step)
            # Time spent busy (tracing, a checkpoint) is no step time.
            if previous.busy is None and report.busy is None and now > last_at:
                kept.intervals.append((now - last_at) / (report.step - last_step))
        if moved or report.step < previous.step:
            if report.step < previous.step or previous.busy == "tracing":
                # Resumed from an earlier step, or the first step ran (after its tracing):
                # the rate starts from here. Checkpoints and evaluation count in the rate,
                # as they do in the time left.
                kept.samples.clear()
            kept.samples.append((now, report.step))
            while len(kept.samples) > 2 and now - kept.samples[0][0] > RATE_WINDOW:
                kept.samples.popleft()

    def forget(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)

    def job_ids(self) -> set[int]:
        return set(self._jobs)

    def _lead(self, job_id: int) -> _Task | None:
        tasks = self._jobs.get(job_id)
        if not tasks:
            return None
        return max(tasks.values(), key=lambda t: (t.report.step, t.quiet_since))

    def read(self, job_id: int) -> JobProgress | None:
        lead = self._lead(job_id)
        if lead is None:
            return None
        now = self._clock()
        report = lead.report
        rate = _rate(lead.samples, now)
        eta = None
        if rate and report.total_steps is not None and report.training:
            eta = max(0.0, (report.total_steps - report.step) / rate)
        busy = next((t.report.busy for t in self._jobs[job_id].values() if t.report.busy), None)
        return JobProgress(
            step=report.step,
            total_steps=report.total_steps,
            epoch=report.epoch + 1 if report.epoch is not None else None,
            epochs=report.epochs,
            steps_per_second=rate,
            eta_seconds=eta,
            busy=busy,
            updated_at=lead.advanced_at,
        )

    def read_many(self, job_ids: Iterable[int]) -> dict[int, JobProgress]:
        out: dict[int, JobProgress] = {}
        for job_id in job_ids:
            progress = self.read(job_id)
            if progress is not None:
                out[job_id] = progress
        return out

    def quiet(
        self, job_id: int, attempts: Mapping[str, int] | None = None, *, at_least: float = 0.0
    ) -> Quiet | None:
        """How long the job's watched tasks have all been quiet, if `at_least` that long.
        `attempts`: each task's current attempt; reports of others are dropped, and a report
        of no task (a client coordinator's, which the user's own process runs) is not watched."""
        tasks = self._jobs.get(job_id)
        if not tasks:
            return None
        if attempts is not None:
            for name in [n for n, t in tasks.items() if attempts.get(n, t.attempt) != t.attempt]:
                del tasks[name]
        watched = {
            n: t
            for n, t in tasks.items()
            if t.report.training and (attempts is None or n in attempts)
        }
        if not watched:
            return None
        seconds = self._clock() - max(t.quiet_since for t in watched.values())
        if seconds < at_least:
            return None
        intervals = [i for t in watched.values() for i in t.intervals]
        busy = next((t.report.busy for t in watched.values() if t.report.busy), None)
        return Quiet(
            seconds=seconds,
            step=max(t.report.step for t in watched.values()),
            median_step_seconds=statistics.median(intervals) if intervals else None,
            busy=busy,
            tasks=tuple(sorted(watched)),
        )


def _rate(samples: deque[tuple[float, int]], now: float) -> float | None:
    """Steps per second over the samples of the last minute, up to now once the step has
    stood still for longer than reports come (so a stalled job's rate falls to 0)."""
    recent = [(t, s) for t, s in samples if now - t <= RATE_WINDOW]
    if not recent:
        return 0.0 if len(samples) >= 2 else None
    (first_at, first), (last_at, last) = recent[0], recent[-1]
    until = last_at if now - last_at <= STALE_SAMPLE else now
    if until <= first_at:
        return None
    return (last - first) / (until - first_at)
