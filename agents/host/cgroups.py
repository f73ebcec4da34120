"""The cgroup filesystem, v2 and v1: finding this process's cgroups, making cgroups, ending
everything in one, memory limits and figures. What it is used for is in ``containment``."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

FREEZE_SECONDS = 1.0


@dataclass(frozen=True)
class Hierarchy:
    mount: Path
    own: Path  # this process's cgroup in it, as a directory


def hierarchies() -> tuple[Hierarchy | None, dict[str, Hierarchy]]:
    """The cgroup2 hierarchy and the v1 ones by controller, each with this process's cgroup."""
    mounts: dict[str, Path] = {}  # "" for cgroup2, else each v1 controller
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            before, _, after = line.partition(" - ")
            fstype, _source, options = [*after.split(), "", "", ""][:3]
            point = Path(before.split()[4])
            if fstype == "cgroup2":
                mounts.setdefault("", point)
            elif fstype == "cgroup":
                for option in options.split(","):
                    mounts.setdefault(option, point)
    v2 = None
    v1: dict[str, Hierarchy] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            relative = path.lstrip("/")
            if number == "0" and controllers == "" and "" in mounts:
                v2 = Hierarchy(mounts[""], mounts[""] / relative)
            for controller in controllers.split(","):
                if controller and controller in mounts:
                    v1[controller] = Hierarchy(mounts[controller], mounts[controller] / relative)
    return v2, v1


def usable(own: Path, base: Path, needs: str) -> bool:
    """Whether this process can make cgroups under ``base`` (which it makes) that have the
    file ``needs``, and move processes from its own cgroup ``own`` into them (which takes
    write access to both ends' cgroup.procs)."""
    probe = base / f"probe-{os.getpid()}"
    try:
        probe.mkdir(parents=True, exist_ok=True)
        try:
            return (
                (probe / needs).exists()
                and os.access(probe / "cgroup.procs", os.W_OK)
                and os.access(own / "cgroup.procs", os.W_OK)
            )
        finally:
            probe.rmdir()
    except OSError:
        return False


def enable_v2_memory(own: Path, namespace: Path) -> bool:
    """Give the namespace's cgroups the v2 memory controller, where this cgroup has it to give
    (a cgroup that holds processes cannot, unless it is the root: the agent then needs a
    delegated subtree of its own)."""
    with contextlib.suppress(OSError):
        if "memory" not in (own / "cgroup.controllers").read_text().split():
            return False
        for directory in (own, own / "strata", namespace):
            if "memory" not in (directory / "cgroup.subtree_control").read_text().split():
                write(directory / "cgroup.subtree_control", "+memory")
        return True
    return False


def write(path: Path, text: str) -> None:
    """One write(2), as cgroup files want it."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read_pids(directory: Path) -> set[int]:
    """Processes in a cgroup and in the cgroups under it (a task could make some, as root)."""
    found: set[int] = set()
    for current, _dirs, _files in os.walk(directory):
        with contextlib.suppress(OSError):
            found.update(int(line) for line in (Path(current) / "cgroup.procs").read_text().split())
    return found


def remove_tree(directory: Path) -> None:
    """Remove a cgroup and those under it; a cgroup that still holds processes stays."""
    for current, _dirs, _files in os.walk(directory, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(current)


def kill_all(directory: Path, v2: bool) -> None:
    """SIGKILL every process in the cgroup, including those it forks meanwhile."""
    if not directory.exists():
        return
    if v2:
        with contextlib.suppress(OSError):
            write(directory / "cgroup.kill", "1")
        return
    # v1: freeze first, so that nothing forks between reading the list and killing it.
    state = directory / "freezer.state"
    with contextlib.suppress(OSError):
        write(state, "FROZEN")
        deadline = time.monotonic() + FREEZE_SECONDS
        while state.read_text().strip() != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.005)
    for pid in read_pids(directory):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        write(state, "THAWED")  # a frozen process dies of SIGKILL only once thawed


def limit_memory(directory: Path, limit: int) -> None:
    """Hold the cgroup to ``limit`` bytes, swap included (v2 or v1)."""
    if (directory / "memory.max").exists():
        write(directory / "memory.max", str(limit))
        with contextlib.suppress(OSError):
            write(directory / "memory.swap.max", "0")
        return
    write(directory / "memory.limit_in_bytes", str(limit))
    with contextlib.suppress(OSError):  # only where swap accounting is on
        write(directory / "memory.memsw.limit_in_bytes", str(limit))


def oom_kills(directory: Path) -> int:
    """Processes of the cgroup the kernel killed for going over its memory limit."""
    v2 = (directory / "memory.max").exists()
    with contextlib.suppress(OSError, ValueError):
        text = (directory / ("memory.events" if v2 else "memory.oom_control")).read_text()
        for line in text.splitlines():
            field, _, value = line.partition(" ")
            if field == "oom_kill":
                return int(value)
    return 0


def memory_peak(directory: Path) -> int | None:
    """The most memory the cgroup's processes used together, in bytes."""
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            return int((directory / name).read_text())
    return None


def cpu_seconds(directory: Path) -> float | None:
    """CPU time the cgroup's processes used (v2's cpu.stat, there with no controller)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        lines = (directory / "cpu.stat").read_text().splitlines()
        return int(dict(line.split() for line in lines)["usage_usec"]) / 1e6
    return None
