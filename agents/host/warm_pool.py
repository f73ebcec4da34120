"""The agent's warm pool: task processes that have imported TensorFlow before their task came.

Each is ``python -m agents.host.warm`` (see that module), started with the environment every
task inherits from the agent, its output already on pipes the agent reads, in a process group of
its own. Once it says it is ready it waits, at no CPU cost, for one assignment; the supervisor takes
one for an attempt that can start warm (agents.host.warm_eligibility says when it cannot), and
the pool starts another in the background. A warm process serves one attempt and is never reused.

The pool holds at most ``size`` idle processes and, together, at most ``memory_budget`` bytes
of their resident memory, measured on each one once it is ready. A refill (after a process was
taken) waits while the host has less than one CPU free, for at most ``REFILL_PATIENCE``
seconds: even at idle priority an import beside CPU-bound training slowed its steps by 10-15%
on a two-core host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.host import procfs
from agents.host.process import OutputProtocol, die_with_parent
from agents.host.procfs import CpuTimes, free_cpus
from agents.host.warm import CHANNEL_FLAG
from agents.host.warm_eligibility import python_entry, task_refusal, warm_env
from agents.memory_size import format_memory

log = logging.getLogger(__name__)

# Importing TensorFlow takes ~5 s of CPU, at idle priority where the agent can (agents.host.
# warm): on a host busy training it waits for spare CPU.
READY_SECONDS = 600.0
MAX_EARLY_OUTPUT = 256 * 1024  # what a warm process printed before its task (import warnings)
RETRY_SECONDS = (5.0, 30.0, 120.0, 600.0)  # after warm processes that failed to get ready
DEFAULT_MEMORY_SHARE = 0.25  # of the host's memory, for idle warm processes together
REFILL_PATIENCE = 30.0  # the longest a refill waits for a free CPU before it starts anyway
FREE_CPU_WINDOW = 1.0  # seconds of the host's CPU times over which a CPU counts as free or not


def default_memory_budget() -> int | None:
    """A quarter of the host's memory (None where it cannot be read: no budget)."""
    with contextlib.suppress(OSError, ValueError):
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * DEFAULT_MEMORY_SHARE)
    return None


def default_size(gpus: int) -> int:
    """One warm process per GPU, for the tasks placed on them, and one more (a CPU task)."""
    return gpus + 1


@dataclass
class WarmProcess:
    """One warm process, ready or not: its pipes (read since it started) and its socket."""

    transport: asyncio.SubprocessTransport
    protocol: OutputProtocol
    channel: socket.socket
    env: dict[str, str]  # what it started with
    early_output: list[tuple[int, bytes]] = field(default_factory=list)
    modules: dict[str, str | None] = field(default_factory=dict)
    rss: int | None = None
    taken: bool = False

    @property
    def pid(self) -> int:
        return self.transport.get_pid()

    @property
    def alive(self) -> bool:
        return not self.protocol.exited.done()

    def keep_output(self, fd: int, data: bytes) -> None:
        if sum(len(chunk) for _, chunk in self.early_output) < MAX_EARLY_OUTPUT:
            self.early_output.append((fd, data))

    def hand_output(self, feed: Callable[[int, bytes], None]) -> None:
        """From now on its output goes to ``feed``, beginning with what it printed so far."""
        for fd, data in self.early_output:
            feed(fd, data)
        self.early_output.clear()
        self.protocol.redirect(feed)

    async def assign(self, env: Mapping[str, str], cwd: Path, argv: list[str]) -> None:
        """Give it its task; it then is the task (OSError: it is gone)."""
        entry = python_entry(argv)
        assert entry is not None
        target = [entry.target, *entry.args]
        message = {"type": "assign", "env": dict(env), "cwd": str(cwd), "argv": target}
        message["mode"] = entry.mode
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendall(self.channel, json.dumps(message).encode() + b"\n")
        finally:
            self.channel.close()

    def discard(self) -> None:
        """End an unused warm process (its process group holds nothing else)."""
        self.channel.close()
        if self.alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self.transport.close()


async def start_warm_process(env: dict[str, str], python: str = sys.executable) -> WarmProcess:
    """Start one and wait until it has imported everything (RuntimeError if it cannot)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    loop = asyncio.get_running_loop()
    early: list[tuple[int, bytes]] = []
    holder: list[WarmProcess] = []

    def on_data(fd: int, data: bytes) -> None:
        if holder:
            holder[0].keep_output(fd, data)
        else:
            early.append((fd, data))

    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: OutputProtocol(on_data),
            python,
            "-m",
            "agents.host.warm",
            CHANNEL_FLAG,
            str(theirs.fileno()),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,  # as a task's (process.py): the group is how it is found and ended
            pass_fds=(theirs.fileno(),),
            preexec_fn=die_with_parent,
        )
    finally:
        theirs.close()
    process = WarmProcess(transport, protocol, ours, env, early_output=early)
    holder.append(process)
    try:
        async with asyncio.timeout(READY_SECONDS):
            line = await _read_line(ours)
        ready = json.loads(line) if line else {}
        if ready.get("type") != "ready":
            raise RuntimeError("it exited before it was ready")
    except asyncio.CancelledError:
        # The pool closed while it was importing: it must not outlive the pool (a test run,
        # which is its parent, would keep it and its 500 MiB for good).
        process.discard()
        await asyncio.wait([protocol.exited], timeout=5)
        raise
    except (TimeoutError, ValueError, OSError, RuntimeError) as exc:
        tail = b"".join(data for _, data in process.early_output)[-2000:]
        process.discard()
        reason = "it took too long" if isinstance(exc, TimeoutError) else str(exc)
        raise RuntimeError(
            f"a warm process did not get ready: {reason}; its output ended with:\n"
            f"{tail.decode(errors='replace')}"
        ) from None
    process.modules = dict(ready.get("modules") or {})
    process.rss = procfs.rss_bytes(process.pid)
    return process


async def _read_line(channel: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while b"\n" not in data:
        chunk = await loop.sock_recv(channel, 65536)
        if not chunk:
            return b""
        data += chunk
    return data[: data.index(b"\n")]


class WarmPool:
    """Idle warm processes, refilled in the background up to ``size`` and ``memory_budget``."""

    def __init__(
        self,
        size: int,
        memory_budget: int | None,
        env: dict[str, str] | None = None,
        refill_patience: float = REFILL_PATIENCE,
        sample_cpu: Callable[[], CpuTimes | None] = procfs.cpu_times,
    ) -> None:
        self.size = size
        self.refill_patience = refill_patience
        self._sample_cpu = sample_cpu
        self._taken = False  # a process was taken: what starts now is a refill
        self.memory_budget = memory_budget
        self.env = env if env is not None else warm_env(os.environ)
        self.idle: list[WarmProcess] = []
        # The top-level modules a warm process has imported, and where from (all alike).
        self.modules: dict[str, str | None] = {}
        self._wanted = asyncio.Event()
        self._filler: asyncio.Task[None] | None = None
        self._failures = 0
        self.budget_note: str | None = None  # why the pool holds fewer than `size`, if so
        self.largest_rss: int | None = None  # of the warm processes measured so far
        self._ending: list[WarmProcess] = []  # discarded, their exits not seen yet
        self.started = 0  # warm processes that became ready, for the agent's log

    def refusal(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> str | None:
        """Why a start that could be warm (``warm_start_refusal``) cannot be with this pool's
        processes: the task's environment or its directory (None: it can)."""
        return task_refusal(argv, cwd, env, self.env, self.modules)

    def pids(self) -> set[int]:
        return {process.pid for process in self.idle}

    def start(self) -> None:
        if self.size > 0 and self._filler is None:
            self._filler = asyncio.create_task(self._fill())
            self._wanted.set()

    def take(self) -> WarmProcess | None:
        """An idle warm process for one attempt (None when there is none); a new one starts."""
        while self.idle:
            process = self.idle.pop(0)
            self._wanted.set()
            if process.alive:
                process.taken = True
                self._taken = True
                log.info("warm process %s taken (%d idle left)", process.pid, len(self.idle))
                return process
            process.discard()
        return None

    def _capacity(self) -> int:
        """How many idle processes fit the budget, by the largest one measured so far."""
        if self.memory_budget is None or self.largest_rss is None:
            return self.size
        fits = self.memory_budget // self.largest_rss
        if fits < self.size:
            self.budget_note = (
                f"the warm pool's memory budget of {format_memory(self.memory_budget)} holds"
                f" {fits} of {self.size} warm processes"
                f" ({format_memory(self.largest_rss)} resident each)"
            )
        return min(self.size, fits)

    async def _fill(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            for gone in [p for p in self.idle if not p.alive]:
                self.idle.remove(gone)
                gone.discard()
            while len(self.idle) < self._capacity():
                if self._taken:
                    await self.until_a_cpu_is_free()
                try:
                    process = await start_warm_process(self.env)
                except RuntimeError as exc:
                    self._failures += 1
                    pause = RETRY_SECONDS[min(self._failures, len(RETRY_SECONDS)) - 1]
                    log.warning("%s; the next try in %.0f s", exc, pause)
                    await asyncio.sleep(pause)
                    continue
                self._failures = 0
                self.started += 1
                self.largest_rss = max(self.largest_rss or 0, process.rss or 0) or None
                total = sum(p.rss or 0 for p in self.idle) + (process.rss or 0)
                if self.memory_budget is not None and total > self.memory_budget:
                    process.discard()  # it does not fit beside the others
                    self._ending.append(process)
                    self._capacity()  # says so
                    log.warning("%s", self.budget_note)
                    break
                process.protocol.exited.add_done_callback(lambda _: self._wanted.set())
                self.modules = process.modules
                self.idle.append(process)
                log.info(
                    "warm process %s ready (%d idle, %.0f MiB resident)",
                    process.pid,
                    len(self.idle),
                    (process.rss or 0) / 2**20,
                )

    async def until_a_cpu_is_free(self) -> None:
        """Wait while the host has less than one CPU free (tasks training on them), at most
        ``refill_patience`` seconds; at once where the host's CPU times cannot be read."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.refill_patience
        cpus = os.cpu_count() or 1
        before = self._sample_cpu()
        while before is not None and loop.time() < deadline:
            await asyncio.sleep(FREE_CPU_WINDOW)
            after = self._sample_cpu()
            if after is None or free_cpus(before, after, cpus) >= 1.0:
                return
            before = after
        if before is not None:
            log.info(
                "refilling the warm pool although the host has no CPU free (waited %.0f s)",
                self.refill_patience,
            )

    async def close(self) -> None:
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
        for process in self.idle:
            process.discard()
        self._ending += self.idle
        self.idle.clear()
        # Reaped while the loop runs, so that no exit is left for a closed loop.
        exits = [process.protocol.exited for process in self._ending]
        if exits:
            await asyncio.wait(exits, timeout=5)
        self._ending.clear()

    def usage(self) -> tuple[int, float, int]:
        """(idle processes, their CPU seconds so far, their resident bytes now)."""
        figures = procfs.process_figures(p.pid for p in self.idle)
        return len(self.idle), figures.cpu_seconds or 0.0, figures.rss_bytes or 0
