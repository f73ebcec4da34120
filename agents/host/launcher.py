"""Starting one task attempt in its containment, capturing its output, and stopping it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agents.environment import TaskEnvironment, TaskEnvironmentError
from agents.host.containment import (
    MARKER_ENV,
    Containment,
    ProcessTreeContainment,
    attempt_name,
)
from agents.host.lines import LineSplitter
from agents.host.process import PYTHON_NAMES, OutputProtocol, die_with_parent, inherited_env
from agents.host.runtime_path import (
    AGENT_PYTHON,
    host_runtime_dir,
    interpreter_version,
    with_runtime_path,
)
from agents.host.stacks import STACKS_SIGNAL
from agents.memory_size import format_memory
from agents.protocol import MAX_LOG_LINE, StartTask, TaskExit, TaskKey

if TYPE_CHECKING:
    from agents.host.warm_pool import WarmProcess

log = logging.getLogger(__name__)

TAIL_LINES = 30
DRAIN_SECONDS = 2.0  # output still in the pipes once the attempt's processes are gone
END_SECONDS = 10.0  # killing everything left of an attempt, before the agent gives up
MAX_TERMINATION_BYTES = 8192

# gRPC channel arguments for every channel TensorFlow makes (it reads the variable whenever it
# makes a channel, after the import: a warm process that gets it with its task uses it). TF caps
# the reconnect backoff at 1 s; a coordinator retries a restarted worker's address no more than
# 0.25 s apart, so that it takes the worker back soon after it listens.
# The connect timeout (grpc.min_reconnect_backoff_ms, 20 s) is left alone: a slow network's
# connects still finish. A job that sets the variable itself keeps its own.
GRPC_OPTIONS_ENV = "TF_GRPC_DEFAULT_OPTIONS"
GRPC_RECONNECT_OPTIONS = "grpc.initial_reconnect_backoff_ms=100,grpc.max_reconnect_backoff_ms=250"


class LaunchError(Exception):
    """The task cannot be started as asked (bad working dir, missing program)."""


def resolve_working_dir(workspace: Path, relative: str) -> Path:
    """The task's working dir, which must stay under the workspace (symlinks included)."""
    root = workspace.resolve()
    if "\x00" in relative:
        raise LaunchError(f"working_dir must not contain NUL bytes, got {relative!r}")
    if Path(relative).is_absolute():
        raise LaunchError(f"working_dir must be relative to the workspace {root}, got {relative!r}")
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise LaunchError(
            f"working_dir {relative!r} leaves the workspace {root}: it resolves to {target}"
        )
    if not target.is_dir():
        raise LaunchError(f"working_dir {relative!r} does not exist under {root}")
    return target


def resolve_argv(argv: list[str], python: str | None = None) -> list[str]:
    """`python` means the job's interpreter (environment.python), or else this agent's own,
    so that tasks see the same packages."""
    return [python or sys.executable, *argv[1:]] if argv[0] in PYTHON_NAMES else list(argv)


def task_env(
    inherited: Mapping[str, str], start_env: Mapping[str, str], server_url: str, ca_file: str | None
) -> dict[str, str]:
    """A task's environment: what every task inherits from the agent, the start message's
    variables, then what only the agent knows: where the server is and which CA to trust
    (the task's runtime trusts the server as the agent does)."""
    try:
        TaskEnvironment.from_env(start_env)
    except TaskEnvironmentError as exc:
        raise LaunchError(f"the task environment in the start message is unusable: {exc}") from None
    env = inherited_env(inherited)
    env.update(start_env)
    env.update(TaskEnvironment(server=server_url, ca_file=ca_file).to_env())
    env.setdefault(GRPC_OPTIONS_ENV, GRPC_RECONNECT_OPTIONS)
    return env


def marker_for(key: TaskKey) -> str:
    """The containment marker of an attempt started without a probed host (tests)."""
    return f"unmanaged-{os.getpid()}/{attempt_name(key)}"


class TaskOutput:
    """An attempt's stdout and stderr, cut into lines for ``on_lines``, with the last few
    kept for its exit."""

    def __init__(
        self, key: TaskKey, on_lines: Callable[[TaskKey, list[str]], None], line_limit: int
    ) -> None:
        self.key = key
        self._on_lines = on_lines
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._splitters = {1: LineSplitter(line_limit), 2: LineSplitter(line_limit)}

    def feed(self, fd: int, data: bytes) -> None:
        self.emit(self._splitters[fd].feed(data))

    def emit(self, lines: list[str]) -> None:
        if lines:
            self.tail.extend(lines)
            self._on_lines(self.key, lines)

    def close(self) -> None:
        for splitter in self._splitters.values():
            self.emit(splitter.close())


def new_termination_file() -> Path:
    """An empty file only this agent's user can write, for the task to explain a refusal."""
    handle, name = tempfile.mkstemp(prefix="strata-termination-", suffix=".json")
    os.close(handle)
    return Path(name)


@dataclass(frozen=True)
class TaskNote:
    """What the task wrote about its end before it exited (agents.runtime.refusal)."""

    refused: str | None = None  # why it stopped for good
    interrupted: str | None = None  # it saved on a stop signal, to be resumed from there


def read_termination(path: Path | None) -> TaskNote:
    """The note the task left in its termination file, if any (the file is then removed)."""
    if path is None:
        return TaskNote()
    try:
        with path.open("rb") as source:
            raw = source.read(MAX_TERMINATION_BYTES)
        path.unlink(missing_ok=True)
    except OSError:
        return TaskNote()
    try:
        note = json.loads(raw.decode("utf-8", "replace")) if raw else None
    except ValueError:
        return TaskNote()
    if not isinstance(note, dict):
        return TaskNote()

    def text(key: str) -> str | None:
        value = note.get(key)
        return str(value)[:4096] if value else None

    return TaskNote(refused=text("reason"), interrupted=text("interrupted"))


class TaskProcess:
    """One running attempt. Output lines go to ``on_lines``; ``wait`` returns how it ended.

    The attempt's processes live in a ``Containment``: its exit is its main process's exit,
    after which whatever it left behind is killed, its output drained for a bounded time, and
    the agent makes sure that nothing of it is left."""

    def __init__(
        self,
        key: TaskKey,
        on_lines: Callable[[TaskKey, list[str]], None],
        containment: Containment | None = None,
        line_limit: int = MAX_LOG_LINE,
        *,
        own_stops_only: bool = False,
    ) -> None:
        self.key = key
        # Whether the attempt gets a stop file (TaskEnvironment.stop_file): its agent gives
        # notice, and the runtime then holds a SIGTERM the agent did not send.
        self.own_stops_only = own_stops_only
        self._stop_file: Path | None = None
        self.output = TaskOutput(key, on_lines, line_limit)
        self._transport: asyncio.SubprocessTransport | None = None
        self._protocol: OutputProtocol | None = None
        self._termination_file: Path | None = None
        self.containment = containment or ProcessTreeContainment(marker_for(key))
        self.stop_requested = False
        self.left_behind: set[int] = set()  # pids that outlived every kill (should stay empty)
        self.memory_limit: int | None = None  # bytes, where its cgroup enforces one

    @property
    def pid(self) -> int:
        assert self._transport is not None
        return self._transport.get_pid()

    def prepare(
        self, command: StartTask, workspace: Path, server_url: str, ca_file: str | None = None
    ) -> tuple[Path, dict[str, str]]:
        """The attempt's working dir and environment, as a cold or a warm start gets them
        (LaunchError if the start cannot run)."""
        cwd = resolve_working_dir(workspace, command.working_dir)
        return cwd, task_env(os.environ, command.env, server_url, ca_file)

    def _mark(self, env: dict[str, str]) -> Path:
        """The attempt's own variables: its containment marker and its termination file."""
        env[MARKER_ENV] = self.containment.marker
        self._termination_file = termination_file = new_termination_file()
        env[TaskEnvironment.variable("termination_file")] = str(termination_file)
        env[TaskEnvironment.variable("stacks_signal")] = str(STACKS_SIGNAL)
        if self.own_stops_only:
            self._stop_file = termination_file.with_name(f"{termination_file.name}.stop")
            env[TaskEnvironment.variable("stop_file")] = str(self._stop_file)
        return termination_file

    def _remove_files(self) -> None:
        for path in (self._termination_file, self._stop_file):
            if path is not None:
                path.unlink(missing_ok=True)

    async def spawn(
        self, command: StartTask, workspace: Path, server_url: str, ca_file: str | None = None
    ) -> None:
        cwd, env = self.prepare(command, workspace, server_url, ca_file)
        python = command.environment.python if command.environment else None
        if python is not None:
            await self._lend_runtime(python, env)
        self._limit_memory(command.memory_limit)
        self._mark(env)
        containment = self.containment

        def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
            containment.preexec()
            die_with_parent()

        loop = asyncio.get_running_loop()
        try:
            self._transport, self._protocol = await loop.subprocess_exec(
                lambda: OutputProtocol(self.output.feed),
                *resolve_argv(command.argv, python),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                process_group=0,  # its own process group, in the agent's session (process.py)
                preexec_fn=preexec,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._remove_files()
            if not isinstance(exc, OSError):  # preexec failed: the child could not join
                raise LaunchError(
                    f"cannot run {command.argv[0]!r} in its {self.containment.kind} containment"
                ) from exc
            raise LaunchError(f"cannot run {command.argv[0]!r}: {exc.strerror or exc}") from exc
        self.containment.attach(self._transport.get_pid())

    async def adopt(
        self, warm: WarmProcess, command: StartTask, cwd: Path, env: dict[str, str]
    ) -> None:
        """Make a warm process this attempt: into its containment, its output to this
        attempt's log, then its task (``prepare``'s cwd and env). LaunchError if it cannot
        be (the warm process is then discarded and nothing of the task has run)."""
        env = dict(env)
        self._mark(env)
        try:
            self.containment.adopt(warm.pid)
            warm.hand_output(self.output.feed)
            self._transport, self._protocol = warm.transport, warm.protocol
            self.containment.attach(warm.pid)
            await warm.assign(env, cwd, command.argv)
        except OSError as exc:
            # Nothing of the task ran: the attempt can still start cold.
            warm.discard()
            self._transport = self._protocol = None
            self._remove_files()
            raise LaunchError(f"cannot hand the task to warm process {warm.pid}: {exc}") from exc

    async def _lend_runtime(self, python: str, env: dict[str, str]) -> None:
        """Another interpreter gets Strata's runtime from this agent (see runtime_path)."""
        try:
            version = await interpreter_version(python)
        except RuntimeError as exc:
            raise LaunchError(str(exc)) from None
        with_runtime_path(env, str(host_runtime_dir()))
        if version != AGENT_PYTHON:
            self.output.emit(
                [
                    f"strata: environment.python {python} is Python {version}; the runtime this"
                    f" agent lends is for Python {AGENT_PYTHON}, so importing agents.runtime"
                    " may fail there"
                ]
            )

    def _limit_memory(self, limit: int | None) -> None:
        if limit is None:
            return
        try:
            enforced = self.containment.limit_memory(limit)
        except OSError as exc:
            raise LaunchError(
                f"cannot set the memory limit of {format_memory(limit)}: {exc}"
            ) from exc
        if enforced:
            self.memory_limit = limit
        else:
            self.output.emit(
                [
                    f"strata: this host cannot enforce the memory limit of {format_memory(limit)}"
                    " (the agent has no memory cgroup); the task runs without one"
                ]
            )

    async def wait(self) -> TaskExit:
        assert self._transport is not None and self._protocol is not None
        await self._protocol.exited
        code = self._transport.get_returncode()
        assert code is not None
        self.containment.main_exited()
        over = self.memory_limit if self.memory_limit and self.containment.oom_kills() else None
        usage = self.containment.usage()
        # The main process is the attempt: what it left behind goes with it, and the pipes
        # they held close with them. Output already written is still read.
        self.left_behind = await self.containment.end(within=END_SECONDS)
        if self.left_behind:
            log.error(
                "%s of job %s: processes %s outlived every kill",
                self.key.task,
                self.key.job_id,
                sorted(self.left_behind),
            )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_SECONDS):
                await asyncio.gather(*self._protocol.closed.values())
        self._transport.close()
        self.output.close()
        died_of = -code if code < 0 else None
        note = read_termination(self._termination_file)
        if self._stop_file is not None:
            self._stop_file.unlink(missing_ok=True)
        return TaskExit(
            key=self.key,
            exit_code=128 + died_of if died_of else code,
            signal=died_of,
            refused=note.refused,
            interrupted=note.interrupted,
            log_tail=list(self.output.tail),
            over_memory_limit=over,
            cpu_seconds=usage.cpu_seconds,
            memory_peak_bytes=usage.memory_peak_bytes,
        )

    async def abandon(self) -> None:
        """It never started: remove what was made for it."""
        self._remove_files()
        await self.containment.end(within=1)

    async def stop(self, grace: float) -> None:
        """SIGTERM to every process of the attempt, then SIGKILL to all of them once the grace
        period is over (``wait`` then makes sure that none is left)."""
        if self._protocol is None or self._protocol.exited.done():
            return
        self.stop_requested = True
        if self._stop_file is not None:
            with contextlib.suppress(OSError):
                self._stop_file.touch(mode=0o600)  # this SIGTERM is the agent's own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGTERM)
        # Once each: to a script (a sidecar evaluator) a second SIGTERM may mean "stop now".
        self.containment.signal(signal.SIGTERM, outside_group=self.pid)
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(self._protocol.exited)
        except TimeoutError:
            self.containment.kill()
