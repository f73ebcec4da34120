"""How fast each worker of a parameter_server job works: the closures it finished per second
over the last window, from the chief's `worker:<i>/closures_done` counters (the coordinator's
running totals, agents/runtime/coordinator.py), kept in memory for straggler detection.

The coordinator reports a counter when it changes, and an unchanged one every 10 s, so the
counter's value at a time is the last one reported at or before it; a worker's rate over
[end - window, end] is the difference of the two values over the window, `end` being the
newest report of the job. The times are the points' wall times (the chief's clock), not
when they arrived: a batch held up in transit does not bend the rates.

Only the chief's current attempt counts: a new one starts from zero (its counters begin
again), reports of an older one are ignored (a late frame of a stopped attempt), and points
sent twice (a resend) are skipped by their time.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agents.protocol import MetricPoint

__all__ = ["ThroughputBoard", "WindowRates", "closures_metric"]

COUNTER = "/closures_done"
WORKER = "worker:"
COORDINATOR_TASK = "chief:"  # a client coordinator reports as chief:0 too
# The newest report older than this (on the server's clock) says nothing about now: the
# coordinator repeats unchanged counters every 10 s.
STALE_SECONDS = 25.0


def closures_metric(index: int) -> str:
    return f"{WORKER}{index}{COUNTER}"


@dataclass(frozen=True)
class WindowRates:
    """Closures per second of each worker over the same `window` seconds, ending at `end`."""

    rates: dict[str, float]  # "worker:1" -> closures per second
    window: float
    end: float  # wall time of the newest report


@dataclass
class _Job:
    attempt: int  # of the chief whose reports these are
    received: float  # monotonic, the last report's arrival
    workers: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)


class ThroughputBoard:
    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._jobs: dict[int, _Job] = {}

    def note(self, job_id: int, task: str, attempt: int, points: Sequence[MetricPoint]) -> None:
        """A metric batch from a runtime. The runtime channel's hot path: a task name check,
        then a suffix check per point, for every batch of every job."""
        if not task.startswith(COORDINATOR_TASK) or self.window <= 0:
            return
        counters = [p for p in points if p.name.endswith(COUNTER) and p.name.startswith(WORKER)]
        if not counters:
            return
        kept = self._jobs.get(job_id)
        if kept is None or attempt > kept.attempt:
            kept = self._jobs[job_id] = _Job(attempt, self._clock())
        elif attempt < kept.attempt:
            return
        kept.received = self._clock()
        for point in counters:
            worker = point.name[: -len(COUNTER)]
            samples = kept.workers.setdefault(worker, deque())
            if samples and point.wall_time <= samples[-1][0]:
                continue  # sent again, or out of order: the counter only grows in time
            samples.append((point.wall_time, point.value))
            # Keep the last sample at or before the window's start: the value there.
            horizon = point.wall_time - self.window
            while len(samples) > 1 and samples[1][0] <= horizon:
                samples.popleft()

    def forget(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)

    def job_ids(self) -> set[int]:
        return set(self._jobs)

    def attempt(self, job_id: int) -> int | None:
        """The chief attempt whose counters are kept."""
        kept = self._jobs.get(job_id)
        return None if kept is None else kept.attempt

    def rates(self, job_id: int) -> WindowRates | None:
        """Every worker's rate over the last full window, if the reports are fresh and span
        one: None until the chief has reported for a whole window. A worker whose counter
        appeared within the window (it joined late) is left out."""
        kept = self._jobs.get(job_id)
        if kept is None or self._clock() - kept.received > STALE_SECONDS:
            return None
        newest = [samples[-1][0] for samples in kept.workers.values() if samples]
        if not newest:
            return None
        end = max(newest)
        start = end - self.window
        rates: dict[str, float] = {}
        for worker, samples in kept.workers.items():
            if not samples or samples[0][0] > start:
                continue
            before = samples[0][1]
            for at, value in samples:
                if at > start:
                    break
                before = value
            rates[worker] = max(0.0, samples[-1][1] - before) / self.window
        if not rates:
            return None
        return WindowRates(rates=rates, window=self.window, end=end)
