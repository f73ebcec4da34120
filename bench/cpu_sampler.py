"""CPU time of a job's processes between two wall-clock times, read after the fact.

A training task's steady-state window (first epoch end → last epoch end) is known only from
its log once it has finished, and by then its process may be gone. So a thread samples the CPU
time of every watched process, and of the whole machine, every `period` seconds; the CPU used
in any window is then interpolated from the samples.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from types import TracebackType

from bench.harness import cpu_seconds, machine_busy_seconds

MACHINE = "machine"


class CpuSampler:
    """`read` gives a process's counter in seconds: its CPU time by default; any counter that
    only grows will do (bench/run_delay.py's time spent waiting for a CPU)."""

    def __init__(self, period: float = 0.1, read: Callable[[int], float] = cpu_seconds) -> None:
        self._period = period
        self._read = read
        self._groups: dict[str, list[int]] = {}
        self._last: dict[int, float] = {}  # each pid's CPU at its last sample
        self._samples: dict[str, list[tuple[float, float]]] = {MACHINE: []}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def watch(self, name: str, *pids: int) -> None:
        """Samples from now on the CPU these processes use together, under `name`."""
        with self._lock:
            self._groups[name] = list(pids)
            self._samples.setdefault(name, [])
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self._sample()

    def _sample(self) -> None:
        with self._lock:
            now = time.time()
            self._samples[MACHINE].append((now, machine_busy_seconds()))
            for pid in {pid for pids in self._groups.values() for pid in pids}:
                # A process that has exited reads 0: it keeps its last value instead.
                self._last[pid] = max(self._read(pid), self._last.get(pid, 0.0))
            for name, pids in self._groups.items():
                self._samples[name].append((now, sum(self._last[pid] for pid in pids)))

    def used(self, name: str, start: float, end: float) -> float | None:
        """CPU seconds `name` used between the two wall-clock times, or None where the samples
        do not cover the window."""
        with self._lock:
            samples = list(self._samples.get(name, ()))
        begin, finish = _at(samples, start), _at(samples, end)
        return None if begin is None or finish is None else finish - begin

    def names(self) -> list[str]:
        with self._lock:
            return [name for name in self._samples if name != MACHINE]


def _at(samples: list[tuple[float, float]], when: float) -> float | None:
    """The CPU time at `when`, interpolated between the samples either side of it."""
    times = [t for t, _ in samples]
    i = bisect.bisect_left(times, when)
    if i == 0 or i == len(samples):
        return samples[i][1] if i < len(samples) and times[i] == when else None
    (t0, c0), (t1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (when - t0) / (t1 - t0)
