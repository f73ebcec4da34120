"""The host's health, probed every few seconds off the heartbeat's path and sent with one.

Probed here: the GPUs through NVML (agents.host.gpu_health) and the free space under the
workspace and the checkpoint directories of the attempts started here. The clock is the
server's to judge: the report carries the agent's wall time. Probes run on a thread of their
own, one round at a time, so that a hung NVML call or a stalled file system never holds the
agent's loop; a probe that fails is reported as unknown, never as a fault.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from agents.host.gpu_health import GpuFindings, GpuHealthProbe
from agents.memory_size import format_memory, parse_memory
from agents.protocol import Device, HealthFault, HostHealth

log = logging.getLogger(__name__)

HEALTH_SECONDS = 10.0  # a round of probes at most this often
# A round still running after this long is reported as unknown (each time it is due).
STUCK_SECONDS = 60.0
MAX_CHECKPOINT_ROOTS = 16  # distinct checkpoint directories watched, the latest kept


@dataclass(frozen=True)
class FreeSpaceLimit:
    """The least free space a watched directory's file system may have: bytes, or a share of
    its size ("2%")."""

    bytes: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, text: str) -> FreeSpaceLimit:
        value = text.strip()
        if value.endswith("%"):
            try:
                percent = float(value[:-1])
            except ValueError:
                percent = -1.0
            if not 0 <= percent <= 100:
                raise ValueError(f"{text!r} is not a share of a disk: write one like 2%")
            return cls(percent=percent)
        return cls(bytes=parse_memory(value))

    def least(self, total: int) -> int:
        if self.percent is not None:
            return int(total * self.percent / 100)
        return self.bytes or 0

    def words(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else format_memory(self.bytes or 0)


DEFAULT_MIN_FREE = FreeSpaceLimit(bytes=1 << 30)


def existing_ancestor(path: Path) -> Path | None:
    """The path itself, or the nearest directory above it that exists (a checkpoint
    directory is made by its task: its file system is that of the nearest existing one)."""
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return None


def probe_disks(paths: Iterable[Path], limit: FreeSpaceLimit, found: GpuFindings) -> None:
    """A fault for each file system under `paths` with less free space than `limit`."""
    seen: set[int] = set()
    for path in paths:
        try:
            where = existing_ancestor(path)
            if where is None:
                continue
            device = os.stat(where).st_dev
            if device in seen:
                continue  # one report per file system
            seen.add(device)
            usage = shutil.disk_usage(where)
        except OSError as exc:
            found.unknown.append(f"disk {path}: {exc}")
            continue
        least = limit.least(usage.total)
        if usage.free < least:
            found.faults.append(
                HealthFault(
                    kind="disk_space",
                    path=str(path),
                    detail=f"{format_memory(usage.free)} free, below {limit.words()}",
                )
            )


class HostProbes:
    """One round of every probe: the GPUs (when NVML sees any) and the watched directories."""

    def __init__(
        self,
        workspace: Path,
        limit: FreeSpaceLimit,
        gpus: GpuHealthProbe | None = None,
        gpus_unknown: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.limit = limit
        self.gpus = gpus
        self.gpus_unknown = gpus_unknown  # why real GPUs cannot be probed, if they cannot
        self._checkpoints: dict[Path, None] = {}  # insertion order: the latest last
        self._lock = threading.Lock()

    @classmethod
    def open(cls, workspace: Path, limit: FreeSpaceLimit, devices: list[Device]) -> HostProbes:
        """Probes for this host: NVML's for its real GPUs, none for simulated ones."""
        indices = [device.index for device in devices if not device.simulated]
        if not indices:
            return cls(workspace, limit)
        try:
            import pynvml
        except ImportError:
            return cls(workspace, limit, gpus_unknown="nvml: pynvml is not installed")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return cls(workspace, limit, gpus_unknown=f"nvml: {exc}")
        return cls(workspace, limit, GpuHealthProbe(pynvml, indices))

    def watch_checkpoints(self, directory: str) -> None:
        """An attempt started here writes its checkpoints under `directory`."""
        with self._lock:
            self._checkpoints.pop(Path(directory), None)
            self._checkpoints[Path(directory)] = None
            while len(self._checkpoints) > MAX_CHECKPOINT_ROOTS:
                del self._checkpoints[next(iter(self._checkpoints))]

    def run(self) -> HostHealth:
        found = GpuFindings()
        if self.gpus is not None:
            gpus = self.gpus.probe()
            found.faults += gpus.faults
            found.warnings += gpus.warnings
            found.unknown += gpus.unknown
        elif self.gpus_unknown is not None:
            found.unknown.append(self.gpus_unknown)
        with self._lock:
            watched = [self.workspace, *self._checkpoints]
        probe_disks(watched, self.limit, found)
        now = time.time()
        return HostHealth(
            faults=found.faults,
            warnings=found.warnings,
            unknown=[text[:256] for text in found.unknown][:64],
            checked_at=now,
            wall_time=now,
        )

    def close(self) -> None:
        if self.gpus is not None:
            self.gpus.close()
            nvml = self.gpus.nvml
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                log.debug("NVML shutdown: %s", exc)


class HealthMonitor:
    """Health reports for the heartbeats: `due()` starts a round of probes on a thread when
    one is due and hands over the last round's result once, never waiting for it."""

    def __init__(
        self,
        probes: Callable[[], HostHealth],
        every: float = HEALTH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        stuck: float = STUCK_SECONDS,
    ) -> None:
        self.probes = probes
        self.every = every
        self.clock = clock
        self.stuck = stuck
        self._started: float | None = None  # when the round in flight (or the last) began
        self._running = False
        self._result: HostHealth | None = None
        self._lock = threading.Lock()

    def due(self) -> HostHealth | None:
        now = self.clock()
        with self._lock:
            result, self._result = self._result, None
            running, started = self._running, self._started
        if result is not None:
            # Stamped as it goes out: the server compares this with its clock.
            return result.model_copy(update={"wall_time": time.time()})
        if running:
            if started is not None and now - started >= self.stuck:
                with self._lock:
                    self._started = now  # said once per `stuck`, not on every beat
                return self._stuck(now - started)
            return None
        if started is None or now - started >= self.every:
            self._start(now)
        return None

    def _start(self, now: float) -> None:
        with self._lock:
            self._running, self._started = True, now
        threading.Thread(target=self._round, name="strata-health", daemon=True).start()

    def _round(self) -> None:
        result: HostHealth | None
        try:
            result = self.probes()
        except Exception as exc:  # a probe's bug must not end the agent, nor read as a fault
            log.exception("health probes failed")
            now = time.time()
            result = HostHealth(
                unknown=[f"probes failed: {exc}"[:256]], checked_at=now, wall_time=now
            )
        with self._lock:
            self._running, self._result = False, result

    def _stuck(self, seconds: float) -> HostHealth:
        now = time.time()
        return HostHealth(
            unknown=[f"probes have not answered for {seconds:.0f}s"], checked_at=now, wall_time=now
        )
