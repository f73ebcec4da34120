"""What the host's GPUs and the tasks' processes use, sampled for the heartbeat every few seconds.

A task attempt's CPU time and resident memory come from its cgroup where it has one (cgroup v2's
cpu.stat, the memory controller's anonymous memory), else from each of its processes
(``Containment.procs()``, their figures read by agents.host.procfs), summed. GPUs are read
through NVML; simulated devices (``--gpus N``) are not sampled at all, so that nothing made up
reaches the charts.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

from agents.host import cgroups
from agents.host.container_task import ContainerTask
from agents.host.containment import CgroupContainment, Containment
from agents.host.launcher import TaskProcess
from agents.host.procfs import ProcessFigures, process_figures
from agents.protocol import Device, DeviceStats, TaskKey, TaskStats, UsageReport

log = logging.getLogger(__name__)

USAGE_SECONDS = 5.0  # a sample goes with the first heartbeat at least this long after the last


def cgroup_resident_bytes(directory: Path) -> int | None:
    """Anonymous memory of a cgroup's processes (v2 memory.stat `anon`, v1 `total_rss`):
    their resident memory without the page cache, which memory.current also counts."""
    with contextlib.suppress(OSError, ValueError):
        for line in (directory / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name in ("anon", "total_rss"):
                return int(value)
    return None


def containment_figures(containment: Containment) -> ProcessFigures:
    """The attempt's figures from its cgroup where it counts them, else from its processes."""
    cpu = rss = None
    if isinstance(containment, CgroupContainment):
        cpu = cgroups.cpu_seconds(containment.killer)
        if containment.memory is not None:
            rss = cgroup_resident_bytes(containment.memory)
    if cpu is None or rss is None:
        counted = process_figures(containment.procs())
        cpu = counted.cpu_seconds if cpu is None else cpu
        rss = counted.rss_bytes if rss is None else rss
    return ProcessFigures(cpu, rss)


class GpuSampler:
    """Utilisation and memory of the host's NVIDIA GPUs, NVML kept open between samples."""

    def __init__(self, nvml: ModuleType, indices: list[int]) -> None:
        self.nvml = nvml
        self.indices = indices

    @classmethod
    def open(cls, devices: list[Device]) -> GpuSampler | None:
        """A sampler for the real devices among `devices`; None when there are none or NVML
        cannot be opened."""
        indices = [device.index for device in devices if not device.simulated]
        if not indices:
            return None
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.warning("NVML cannot be opened (%s): no GPU utilisation is reported", exc)
            return None
        return cls(pynvml, indices)

    def sample(self) -> list[DeviceStats]:
        """One figure set per device; a figure NVML refuses for a device is left out (None)."""
        nvml = self.nvml
        stats = []
        for index in self.indices:
            utilization = used = total = None
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                log.debug("NVML: no handle for GPU %d: %s", index, exc)
                stats.append(DeviceStats(index=index))
                continue
            with contextlib.suppress(nvml.NVMLError):
                utilization = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            with contextlib.suppress(nvml.NVMLError):
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                used, total = int(memory.used), int(memory.total)
            stats.append(
                DeviceStats(
                    index=index,
                    utilization_percent=utilization,
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                )
            )
        return stats

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


Attempts = Callable[[], Mapping[TaskKey, TaskProcess | ContainerTask]]


class UsageSampler:
    """Samples for the heartbeats: `due()` gives one at most every `every` seconds."""

    def __init__(
        self,
        attempts: Attempts,
        gpus: GpuSampler | None = None,
        every: float = USAGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.attempts = attempts
        self.gpus = gpus
        self.every = every
        self.clock = clock
        self._last: float | None = None
        self._cpu: dict[TaskKey, tuple[float, float]] = {}  # the previous (cpu seconds, time)

    def due(self) -> UsageReport | None:
        now = self.clock()
        if self._last is not None and now - self._last < self.every:
            return None
        self._last = now
        try:
            return self.sample()
        except Exception:  # a heartbeat must go out whatever sampling ran into
            log.exception("sampling usage failed")
            return None

    def sample(self) -> UsageReport:
        now = self.clock()
        tasks = []
        previous, self._cpu = self._cpu, {}
        for key, attempt in self.attempts().items():
            if not isinstance(attempt, TaskProcess):
                continue  # a container's processes are the engine's to count
            figures = containment_figures(attempt.containment)
            percent = None
            if figures.cpu_seconds is not None:
                self._cpu[key] = (figures.cpu_seconds, now)
                before = previous.get(key)
                if before is not None and now > before[1]:
                    # A process of the attempt that ended took its CPU time with it: never < 0.
                    percent = max(0.0, (figures.cpu_seconds - before[0]) / (now - before[1]))
                    percent = round(percent * 100, 1)
            tasks.append(
                TaskStats(
                    key=key,
                    cpu_seconds=figures.cpu_seconds,
                    cpu_percent=percent,
                    rss_bytes=figures.rss_bytes,
                )
            )
        devices = self.gpus.sample() if self.gpus is not None else []
        return UsageReport(wall_time=time.time(), devices=devices, tasks=tasks)

    def close(self) -> None:
        if self.gpus is not None:
            self.gpus.close()
