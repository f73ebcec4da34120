"""Containment of a task attempt: every process it starts, wherever it moves, ends with it.

A process can leave its process group and session (``setsid``, a double fork), so signalling
the group does not reach everything a task started. Where the host lets the agent make cgroups
(root, or a delegated subtree), each attempt gets a cgroup that its processes join before they
exec and cannot leave: cgroup v2's ``cgroup.kill`` ends them all at once, or, on a host with
only cgroup v1, the freezer stops them from forking while they are killed. Where there are no
usable cgroups, the agent becomes a child subreaper, so that orphans come back to it, and finds
an attempt's processes by the marker in their environment, their process group and their
parentage.

``probe`` looks at the host once; its factory makes one ``Containment`` per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from agents.environment import TaskEnvironment
from agents.host import cgroups, procfs
from agents.protocol import TaskKey

log = logging.getLogger(__name__)

MARKER_ENV = TaskEnvironment.variable("containment")  # which agent's attempt a process is
PR_SET_CHILD_SUBREAPER = 36
KILL_POLL_SECONDS = 0.02


def namespace_for(name: str, server_url: str) -> str:
    """This agent's own part of the host, from `name` (the agent passes its identity and its
    name) and its server: a second agent under the same name, refused by the server, never
    takes the first one's attempts for its own leftovers."""
    digest = hashlib.sha256(server_url.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', name)[:64]}-{digest}"


def attempt_name(key: TaskKey) -> str:
    return f"job{key.job_id}-{key.task.replace(':', '-')}-a{key.attempt}"


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float | None = None
    memory_peak_bytes: int | None = None


class Containment:
    """The processes of one attempt. The launcher calls ``preexec`` in the child before exec,
    ``attach`` with the main pid after spawning, and ``end`` once the attempt is over."""

    kind = "none"

    def __init__(self, marker: str) -> None:
        self.marker = marker  # MARKER_ENV's value for this attempt
        self.main_pid: int | None = None
        self.main_alive = False

    def preexec(self) -> None:  # pragma: no cover - runs in the child between fork and exec
        """Join the attempt's group (in the child, so that nothing it forks is born outside)."""

    def attach(self, pid: int) -> None:
        self.main_pid = pid
        self.main_alive = True

    def adopt(self, pid: int) -> None:
        """Take in a process that was started before the attempt (a warm process, which has
        forked nothing yet). Without cgroups there is nothing to do: it leads its own process
        group, which is how the attempt's processes are found, and what it starts from now on
        carries the marker in its environment."""

    def main_exited(self) -> None:
        """Its pid may now be reused: from here on it says nothing about the attempt."""
        self.main_alive = False

    def procs(self) -> set[int]:
        """Live (not zombie) processes of the attempt."""
        raise NotImplementedError

    def signal(self, sig: int, *, outside_group: int | None = None) -> None:
        """Send every process of the attempt a signal (SIGTERM, to ask them to stop); with
        `outside_group`, only those not in that process group (already signalled with it)."""
        for pid in self.procs():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if outside_group is None or os.getpgid(pid) != outside_group:
                    os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL everything in the attempt, once."""
        self.signal(signal.SIGKILL)

    async def end(self, within: float = 10.0) -> set[int]:
        """Kill until nothing of the attempt is left; the pids still alive after ``within``
        seconds (none when it ended). Then the attempt's traces on the host are removed."""
        deadline = time.monotonic() + within
        while (left := self.procs()) and time.monotonic() < deadline:
            self.kill()
            await asyncio.sleep(KILL_POLL_SECONDS)
            self.reap()
        self.reap()  # those that died of the last kill
        if not left:
            self.remove()
        return left

    def reap(self) -> None:
        """Collect what became the agent's zombies (only the subreaper has any)."""

    def remove(self) -> None:
        """Remove the attempt's cgroups once it is empty."""

    def usage(self) -> Usage:
        return Usage()

    def limit_memory(self, limit: int) -> bool:
        """Hold the attempt's processes to ``limit`` bytes together; False where it cannot."""
        return False

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for going over the memory limit."""
        return 0


# --- no cgroups: the process tree, the process group and the marker --------------------------


class ProcessTreeContainment(Containment):
    """No cgroups: an attempt is what carries its marker, is in the main process's process
    group, or descends from it. A process that leaves the group and clears its environment escapes
    this; with the agent as subreaper it still comes back to the agent as an orphan, and is
    reaped once dead."""

    kind = "subreaper"

    def __init__(self, marker: str, subreaper: bool = False) -> None:
        super().__init__(marker)
        self.subreaper = subreaper
        self._seen: set[int] = set()  # every pid found in the attempt, for reaping

    def procs(self) -> set[int]:
        entry = f"{MARKER_ENV}={self.marker}".encode()
        me = os.getpid()
        stats = procfs.process_table()
        found = set()
        for pid, stat in stats.items():
            if pid == me or stat.gone:
                continue
            in_group = self.main_pid is not None and stat.group == self.main_pid
            if in_group or entry in procfs.environ(pid):
                found.add(pid)
        if found or self.main_alive:  # descendants that left the group and the marker
            children: dict[int, list[int]] = {}
            for pid, stat in stats.items():
                children.setdefault(stat.parent, []).append(pid)
            stack = [*found, *([self.main_pid] if self.main_alive and self.main_pid else [])]
            while stack:
                for child in children.get(stack.pop(), []):
                    if child not in found and not stats[child].gone:
                        found.add(child)
                        stack.append(child)
        found.discard(me)
        self._seen |= found
        return found

    def kill(self) -> None:
        # Stop first so that none of them forks between the scan and the kill.
        pids = self.procs()
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def reap(self) -> None:
        if not self.subreaper:
            return
        me = os.getpid()
        for pid in list(self._seen):
            if pid == self.main_pid:
                continue  # asyncio's child watcher reaps the main process
            stat = procfs.state(pid)
            if stat is None:
                self._seen.discard(pid)
            elif stat.parent == me and stat.state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                self._seen.discard(pid)


def become_subreaper() -> bool:
    """Make orphans of this process's descendants its children rather than init's."""
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def reap_orphans(keep: set[int]) -> int:
    """Reap this process's zombie children but ``keep`` (main processes, which asyncio reaps):
    orphans that came back to the subreaper and exited on their own. How many it reaped."""
    me, reaped = os.getpid(), 0
    for pid in procfs.all_pids():
        stat = None if pid in keep else procfs.state(pid)
        if stat is not None and stat.state == "Z" and stat.parent == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
                reaped += 1
    return reaped


class CgroupContainment(Containment):
    """One cgroup per attempt in each hierarchy used: ``killer`` (v2 with cgroup.kill, or the
    v1 freezer) holds and ends the processes; ``memory`` (v2 or v1) gives limits and figures."""

    def __init__(
        self, marker: str, killer: Path, v2: bool, joined: list[Path], memory: Path | None = None
    ) -> None:
        super().__init__(marker)
        self.killer = killer
        self.v2 = v2
        self.joined = joined  # every attempt cgroup, the killer's among them
        self.memory = memory
        self.kind = "cgroup2" if v2 else "cgroup1-freezer"
        self._procs_files = [str(path / "cgroup.procs") for path in joined]

    def create(self) -> None:
        for path in self.joined:
            path.mkdir(parents=True, exist_ok=True)

    def preexec(self) -> None:  # pragma: no cover - runs in the child between fork and exec
        for name in self._procs_files:  # "0": the writing process itself
            fd = os.open(name, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def adopt(self, pid: int) -> None:
        # Any process may be moved after exec by writing its pid (OSError if it cannot be).
        for name in self._procs_files:
            cgroups.write(Path(name), str(pid))

    def procs(self) -> set[int]:
        return {
            pid
            for pid in cgroups.read_pids(self.killer)
            if (stat := procfs.state(pid)) is None or stat.state != "Z"
        }

    def kill(self) -> None:
        cgroups.kill_all(self.killer, self.v2)

    def remove(self) -> None:
        for path in self.joined:
            cgroups.remove_tree(path)

    def limit_memory(self, limit: int) -> bool:
        if self.memory is None:
            return False
        cgroups.limit_memory(self.memory, limit)
        return True

    def oom_kills(self) -> int:
        return 0 if self.memory is None else cgroups.oom_kills(self.memory)

    def usage(self) -> Usage:
        peak = None if self.memory is None else cgroups.memory_peak(self.memory)
        return Usage(cpu_seconds=cgroups.cpu_seconds(self.killer), memory_peak_bytes=peak)


class Containments:
    """The way this host contains attempts, decided once; makes one ``Containment`` each."""

    def __init__(
        self,
        namespace: str,
        killer: Path | None = None,
        v2: bool = False,
        memory: Path | None = None,
        subreaper: bool = False,
    ) -> None:
        self.namespace = namespace
        self.killer = killer  # the namespace's directory in the killing hierarchy
        self.v2 = v2
        self.memory = memory  # the namespace's directory in the memory hierarchy, if any
        self.subreaper = subreaper

    @property
    def kind(self) -> str:
        if self.killer is None:
            return "subreaper" if self.subreaper else "process tree"
        return "cgroup2" if self.v2 else "cgroup1-freezer"

    @classmethod
    def probe(cls, namespace: str, use_cgroups: bool = True, use_v2: bool = True) -> Containments:
        """cgroup v2 with cgroup.kill, else the v1 freezer; else the agent as subreaper.
        (``use_cgroups=False`` and ``use_v2=False`` are for tests of the other paths.)"""
        v2, v1 = cgroups.hierarchies() if use_cgroups else (None, {})
        memory = v1["memory"].own / "strata" / namespace if "memory" in v1 else None
        if memory is not None and not cgroups.usable(
            v1["memory"].own, memory, "memory.limit_in_bytes"
        ):
            memory = None
        if v2 is not None and use_v2:
            killer = v2.own / "strata" / namespace
            if cgroups.usable(v2.own, killer, "cgroup.kill"):
                if memory is None and cgroups.enable_v2_memory(v2.own, killer):
                    memory = killer  # each attempt's own cgroup then has memory.max
                return cls(namespace, killer, True, memory)
        if "freezer" in v1:
            killer = v1["freezer"].own / "strata" / namespace
            if cgroups.usable(v1["freezer"].own, killer, "freezer.state"):
                return cls(namespace, killer, False, memory)
        return cls(namespace, subreaper=become_subreaper())

    def close(self) -> None:
        """Remove the namespace's cgroups, where no attempt is left in them."""
        for directory in (self.killer, self.memory):
            if directory is not None:
                with contextlib.suppress(OSError):
                    directory.rmdir()

    def marker(self, key: TaskKey) -> str:
        return f"{self.namespace}/{attempt_name(key)}"

    def create(self, key: TaskKey) -> Containment:
        """The attempt's containment, its cgroups made (ready for ``preexec``)."""
        if self.killer is None:
            return ProcessTreeContainment(self.marker(key), subreaper=self.subreaper)
        name = attempt_name(key)
        joined = [self.killer / name]
        memory = self.memory / name if self.memory is not None else None
        if memory is not None and memory != joined[0]:
            joined.append(memory)
        containment = CgroupContainment(
            self.marker(key), self.killer / name, self.v2, joined, memory
        )
        containment.create()
        return containment

    async def end_leftovers(self, keep: frozenset[str] = frozenset()) -> list[str]:
        """End what is left of attempts this agent no longer runs (it restarted); their names."""
        ended = []
        if self.killer is not None:
            with contextlib.suppress(OSError):
                for entry in sorted(self.killer.iterdir()):
                    if entry.is_dir() and entry.name not in keep:
                        joined = [entry]
                        memory = self.memory
                        if memory not in (None, self.killer) and (memory / entry.name).is_dir():
                            joined.append(memory / entry.name)
                        containment = CgroupContainment("", entry, self.v2, joined)
                        if containment.procs():
                            ended.append(entry.name)
                        await containment.end()
            return ended
        for name in sorted(_marked_attempts(self.namespace) - keep):
            await ProcessTreeContainment(f"{self.namespace}/{name}", self.subreaper).end()
            ended.append(name)
        return ended


def _marked_attempts(namespace: str) -> set[str]:
    """The attempts of a namespace that some live process is marked with."""
    prefix = f"{MARKER_ENV}={namespace}/".encode()
    found = set()
    for pid in procfs.all_pids():
        if pid == os.getpid():
            continue
        for entry in procfs.environ(pid):
            if entry.startswith(prefix):
                found.add(entry[len(prefix) :].decode(errors="replace"))
    return found
