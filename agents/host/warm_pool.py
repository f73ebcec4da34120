"""The agent's warm pool: task processes that have imported TensorFlow before their task came.

Each is ``python -m agents.host.warm`` (see that module), started with the environment every
task inherits from the agent, its output already on pipes the agent reads, in its own session.
Once it says it is ready it waits, at no CPU cost, for one assignment; the supervisor takes
one for an attempt that can start warm (``warm_start_refusal`` says when it cannot), and the
pool starts another in the background. A warm process serves one attempt and is never reused.

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

from agents.host.launcher import PYTHON_NAMES, WITHHELD_ENV, _die_with_parent, _Protocol
from agents.host.warm import CHANNEL_FLAG
from agents.memory_size import format_memory
from agents.protocol import StartTask

log = logging.getLogger(__name__)

# Importing TensorFlow takes ~5 s of CPU, at idle priority where the agent can (agents.host.
# warm): on a host busy training it waits for spare CPU.
READY_SECONDS = 600.0
MAX_EARLY_OUTPUT = 256 * 1024  # what a warm process printed before its task (import warnings)
RETRY_SECONDS = (5.0, 30.0, 120.0, 600.0)  # after warm processes that failed to get ready
DEFAULT_MEMORY_SHARE = 0.25  # of the host's memory, for idle warm processes together
REFILL_PATIENCE = 30.0  # the longest a refill waits for a free CPU before it starts anyway
FREE_CPU_WINDOW = 1.0  # seconds of /proc/stat over which a CPU counts as free or not

CpuTimes = tuple[float, float]  # (idle, total) clock ticks of all CPUs since boot

# Variables read while the interpreter starts or TensorFlow is imported: a task whose
# environment gives one of them another value than the warm process had cannot be the same
# warm as cold, and starts cold. The rest of the environment is read later (TF_CONFIG by the
# strategy, CUDA_VISIBLE_DEVICES when the first device is initialised, GRPC_FAIL_FAST when a
# channel is made), after the warm process has taken the task's values.
IMPORT_TIME_PREFIXES = (
    "PYTHON",  # the interpreter's own (PYTHONPATH, PYTHONHASHSEED, PYTHONUNBUFFERED, ...)
    "LD_",  # the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH)
    "MALLOC_",  # glibc's allocator, set up before main
    "LC_",  # the locale: stdio and filesystem encodings
    "TF_CPP_",  # TensorFlow's C++ logging, read when it first logs (the import does)
    "TF_ENABLE_",  # TF_ENABLE_ONEDNN_OPTS and friends, read by the import
    "XLA_",
    "CUDA_",  # CUDA_HOME, CUDA_CACHE_*: found by the import's library loading
    "OMP_",  # OpenMP and MKL thread pools, made by the import
    "KMP_",
    "MKL_",
    "GRPC_",  # gRPC's tracing and verbosity, read when gRPC is loaded
)
IMPORT_TIME_NAMES = frozenset(
    {"TF_USE_LEGACY_KERAS", "TF_XLA_FLAGS", "KERAS_BACKEND", "LANG", "LANGUAGE", "TZ"}
)
# Read after the assignment although their prefixes say otherwise.
READ_AFTER_IMPORT = frozenset({"CUDA_VISIBLE_DEVICES", "GRPC_FAIL_FAST"})


def read_at_import(name: str) -> bool:
    """Whether a variable is read before a warm process gets its task (see above)."""
    if name in READ_AFTER_IMPORT:
        return False
    return name in IMPORT_TIME_NAMES or name.startswith(IMPORT_TIME_PREFIXES)


def warm_env(inherited: Mapping[str, str]) -> dict[str, str]:
    """A warm process's environment: what every task inherits from the agent (launcher's
    task_env before the start message's variables), and what the import needs."""
    env = {k: v for k, v in inherited.items() if k not in WITHHELD_ENV}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    return env


def import_time_differences(task: Mapping[str, str], warm: Mapping[str, str]) -> list[str]:
    """The import-time variables the task would see otherwise than the warm process did."""
    names = {name for name in (*task, *warm) if read_at_import(name)}
    return sorted(name for name in names if task.get(name) != warm.get(name))


@dataclass(frozen=True)
class Entry:
    """How a task's argv runs its Python: a script or a module, and its own arguments."""

    mode: str  # "script" | "module"
    target: str  # the script's path as given, or the module's name
    args: list[str]


def python_entry(argv: list[str]) -> Entry | None:
    """`python script.py ...` or `python -m module ...`; None for anything else."""
    if len(argv) < 2 or argv[0] not in PYTHON_NAMES:
        return None
    if argv[1] == "-m":
        if len(argv) < 3 or not all(part.isidentifier() for part in argv[2].split(".")):
            return None
        return Entry("module", argv[2], argv[3:])
    if argv[1].startswith("-") or not argv[1]:
        return None  # interpreter options (-u, -X, -c, ...) are the interpreter's business
    return Entry("script", argv[1], argv[2:])


def warm_start_refusal(command: StartTask) -> str | None:
    """Why this start cannot be warm whatever the pool holds (None: it can)."""
    if not command.warm_start:
        return "the job asks for cold starts (warm_start: false)"
    if command.environment is not None:
        return "the job runs in its own environment"
    if python_entry(command.argv) is None:
        return "the entrypoint is not `python script.py` or `python -m module`"
    if command.memory_limit is not None:
        # What a warm process imported is charged to the cgroup it was in before.
        return "the task has a memory limit"
    return None


def importable_names(directory: Path) -> set[str]:
    """Top-level modules a directory first on sys.path would provide: modules and regular
    packages (a namespace package loses to one found later)."""
    names = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.is_dir():
                if (Path(entry.path) / "__init__.py").exists():
                    names.add(entry.name)
            elif entry.name.endswith((".py", ".pyc", ".so")):
                names.add(entry.name.split(".", 1)[0])
    return names


def shadowed(modules: Mapping[str, str | None], path0: Path) -> list[str]:
    """Modules the warm process imported from elsewhere that a cold start would have found
    in ``path0`` (its sys.path[0]) instead."""
    real = os.path.realpath(path0)
    return sorted(
        name
        for name in importable_names(path0)
        if name in modules and modules[name] is not None and modules[name] != real
    )


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a process so far."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        fields = raw[raw.rfind(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def default_memory_budget() -> int | None:
    """A quarter of the host's memory (None where it cannot be read: no budget)."""
    with contextlib.suppress(OSError, ValueError):
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * DEFAULT_MEMORY_SHARE)
    return None


def default_size(gpus: int) -> int:
    """One warm process per GPU, for the tasks placed on them, and one more (a CPU task)."""
    return gpus + 1


def cpu_times() -> CpuTimes | None:
    """All CPUs' idle and total ticks (/proc/stat's first line); None where it cannot be read."""
    try:
        with open("/proc/stat") as stat:
            fields = [float(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return fields[3] + fields[4], sum(fields[:8])  # idle + iowait; user..steal


def free_cpus(before: CpuTimes, after: CpuTimes, cpus: int) -> float:
    """How many CPUs were idle on average between two samples."""
    total = after[1] - before[1]
    return cpus * (after[0] - before[0]) / total if total > 0 else float(cpus)


@dataclass
class WarmProcess:
    """One warm process, ready or not: its pipes (read since it started) and its socket."""

    transport: asyncio.SubprocessTransport
    protocol: _Protocol
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
        """End an unused warm process (its session holds nothing else)."""
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
            lambda: _Protocol(on_data),
            python,
            "-m",
            "agents.host.warm",
            CHANNEL_FLAG,
            str(theirs.fileno()),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # as a task's: the session is how it is found and ended
            pass_fds=(theirs.fileno(),),
            preexec_fn=_die_with_parent,
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
    process.rss = rss_bytes(process.pid)
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
        sample_cpu: Callable[[], CpuTimes | None] = cpu_times,
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
        differs = import_time_differences(env, self.env)
        if differs:
            return f"the job sets {', '.join(differs)}, read before TensorFlow loads"
        entry = python_entry(argv)
        assert entry is not None
        if entry.mode == "script":
            script = cwd / entry.target
            if not script.is_file():
                return f"{entry.target} is not a file (Python says why)"
            path0 = Path(os.path.realpath(script)).parent
        else:
            path0 = cwd
        if self.modules and (hidden := shadowed(self.modules, path0)):
            return f"{path0} has {', '.join(hidden)}, which a warm process imported from elsewhere"
        return None

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
        ``refill_patience`` seconds; at once where /proc/stat cannot be read."""
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
        cpu = sum(cpu_seconds(p.pid) or 0.0 for p in self.idle)
        rss = sum(rss_bytes(p.pid) or 0 for p in self.idle)
        return len(self.idle), cpu, rss
