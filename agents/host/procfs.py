"""Process figures, read in this one place: CPU time, resident memory, threads, the host's CPU
times, and the process table with the environment markers that containment walks.

Figures come through psutil. The process table (every process's state, parent and process group) and
the environments are read from /proc here instead: without cgroups, containment reads them for
every process on the host, for each attempt at each usage sample and every few milliseconds
while it ends one, and psutil's per-process objects make that read several times slower.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

CpuTimes = tuple[float, float]  # (idle, total) seconds of all CPUs since boot
GONE = ("Z", "X")  # /proc states of a process that has exited: a zombie, or dead


@dataclass(frozen=True)
class ProcessFigures:
    cpu_seconds: float | None
    rss_bytes: int | None


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a process so far (None: it is gone or hidden)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return times.user + times.system


def rss_bytes(pid: int) -> int | None:
    """A process's resident memory (None: it is gone or hidden)."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


def process_figures(pids: Iterable[int]) -> ProcessFigures:
    """User and system CPU time and resident memory of these processes together; a process
    that is gone meanwhile counts for nothing. None for both when none could be read."""
    cpu, rss, read = 0.0, 0, 0
    for pid in pids:
        try:
            process = psutil.Process(pid)
            with process.oneshot():
                times = process.cpu_times()
                resident = process.memory_info().rss
        except (psutil.Error, OSError):
            continue
        cpu += times.user + times.system
        rss += resident
        read += 1
    if not read:
        return ProcessFigures(None, None)
    return ProcessFigures(cpu, rss)


def cpu_times() -> CpuTimes | None:
    """All CPUs' idle (with iowait) and total time (user to steal); None where it cannot be
    read."""
    try:
        times = psutil.cpu_times()
    except (psutil.Error, OSError, RuntimeError):
        return None
    busy = times.user + times.nice + times.system + times.irq + times.softirq
    idle = times.idle + getattr(times, "iowait", 0.0)
    return idle, idle + busy + getattr(times, "steal", 0.0)


def free_cpus(before: CpuTimes, after: CpuTimes, cpus: int) -> float:
    """How many CPUs were idle on average between two samples."""
    total = after[1] - before[1]
    return cpus * (after[0] - before[0]) / total if total > 0 else float(cpus)


def thread_ids(pid: int | None = None) -> list[int]:
    """The ids of a process's threads (this process's by default)."""
    return [thread.id for thread in psutil.Process(pid).threads()]


# --- the process table, read from /proc directly (see the module docstring) ---------------


class ProcessState(NamedTuple):
    state: str  # /proc's one letter: R, S, D, Z, ...
    parent: int
    group: int  # the process group

    @property
    def gone(self) -> bool:
        return self.state in GONE


def state(pid: int) -> ProcessState | None:
    """A process's state, parent pid and process group, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        # The command name (field 2) may hold spaces and parentheses: split after its end.
        fields = raw[raw.rfind(b")") + 2 :].split()
        return ProcessState(fields[0].decode(), int(fields[1]), int(fields[2]))
    except (OSError, ValueError, IndexError):
        return None


def all_pids() -> list[int]:
    return psutil.pids()


def process_table() -> dict[int, ProcessState]:
    """Every process on the host that has not gone meanwhile, by pid."""
    return {pid: found for pid in all_pids() if (found := state(pid)) is not None}


def environ(pid: int) -> list[bytes]:
    """A process's environment as ``NAME=value`` entries (none when it cannot be read)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return []
