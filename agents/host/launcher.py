"""Starting one task attempt as a process group, capturing its output, and stopping it."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from agents.environment import TaskEnvironment, TaskEnvironmentError
from agents.host.lines import LineSplitter
from agents.protocol import StartTask, TaskExit, TaskKey

TAIL_LINES = 30
PR_SET_PDEATHSIG = 1
PYTHON_NAMES = frozenset({"python", "python3"})
MAX_TERMINATION_BYTES = 8192
# Agent credentials stay with the agent; a task gets its own scoped token instead.
# The agent's and the server's credentials (values and files) are not the task's business.
WITHHELD_ENV = (
    "STRATA_TOKEN",
    "STRATA_AGENT_TOKEN",
    "STRATA_API_TOKEN",
    "STRATA_AGENT_TOKEN_FILE",
    "STRATA_API_TOKEN_FILE",
    "STRATA_DATABASE_PASSWORD_FILE",
)


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


def resolve_argv(argv: list[str]) -> list[str]:
    """`python` means this agent's own interpreter, so tasks see the same packages."""
    return [sys.executable, *argv[1:]] if argv[0] in PYTHON_NAMES else list(argv)


def task_env(
    inherited: Mapping[str, str], start_env: Mapping[str, str], server_url: str, ca_file: str | None
) -> dict[str, str]:
    """A task's environment: the agent's own less its credentials, the start message's
    variables, then what only the agent knows: where the server is and which CA to trust
    (the task's runtime trusts the server as the agent does)."""
    try:
        TaskEnvironment.from_env(start_env)
    except TaskEnvironmentError as exc:
        raise LaunchError(f"the task environment in the start message is unusable: {exc}") from None
    env = {k: v for k, v in inherited.items() if k not in WITHHELD_ENV}
    env.update(start_env)
    env.update(TaskEnvironment(server=server_url, ca_file=ca_file).to_env())
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the log as they are printed
    return env


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # If the agent itself is killed, the kernel sends the task SIGKILL: no orphaned servers.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _new_termination_file() -> Path:
    """An empty file only this agent's user can write, for the task to explain a refusal."""
    handle, name = tempfile.mkstemp(prefix="strata-termination-", suffix=".json")
    os.close(handle)
    return Path(name)


class TaskProcess:
    """One running attempt. Output lines go to ``on_lines``; ``wait`` returns how it ended."""

    def __init__(self, key: TaskKey, on_lines: Callable[[TaskKey, list[str]], None]) -> None:
        self.key = key
        self._on_lines = on_lines
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._process: asyncio.subprocess.Process | None = None
        self._pumps: list[asyncio.Task[None]] = []
        self._termination_file: Path | None = None
        self.stop_requested = False

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    async def spawn(
        self, command: StartTask, workspace: Path, server_url: str, ca_file: str | None = None
    ) -> None:
        cwd = resolve_working_dir(workspace, command.working_dir)
        env = task_env(os.environ, command.env, server_url, ca_file)
        self._termination_file = _new_termination_file()
        env[TaskEnvironment.variable("termination_file")] = str(self._termination_file)
        try:
            self._process = await asyncio.create_subprocess_exec(
                *resolve_argv(command.argv),
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: stop reaches every child
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            self._termination_file.unlink(missing_ok=True)
            raise LaunchError(f"cannot run {command.argv[0]!r}: {exc.strerror or exc}") from exc
        assert self._process.stdout is not None and self._process.stderr is not None
        self._pumps = [
            asyncio.create_task(self._pump(self._process.stdout)),
            asyncio.create_task(self._pump(self._process.stderr)),
        ]

    async def _pump(self, stream: asyncio.StreamReader) -> None:
        splitter = LineSplitter()
        while chunk := await stream.read(65536):
            self._emit(splitter.feed(chunk))
        self._emit(splitter.close())

    def _emit(self, lines: list[str]) -> None:
        if lines:
            self._tail.extend(lines)
            self._on_lines(self.key, lines)

    async def wait(self) -> TaskExit:
        assert self._process is not None
        code = await self._process.wait()
        self._signal_group(signal.SIGKILL)  # whatever it left behind goes with it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._pumps), timeout=5)
        for pump in self._pumps:
            pump.cancel()
        died_of = -code if code < 0 else None
        return TaskExit(
            key=self.key,
            exit_code=128 + died_of if died_of else code,
            signal=died_of,
            refused=self._read_refusal(),
            log_tail=list(self._tail),
        )

    def _read_refusal(self) -> str | None:
        """The reason the task gave for stopping for good, if it wrote one (then removed)."""
        path, self._termination_file = self._termination_file, None
        if path is None:
            return None
        try:
            with path.open("rb") as source:
                raw = source.read(MAX_TERMINATION_BYTES)
            path.unlink(missing_ok=True)
        except OSError:
            return None
        if not raw:
            return None
        try:
            reason = json.loads(raw.decode("utf-8", "replace")).get("reason")
        except (ValueError, AttributeError):
            return None
        return str(reason)[:4096] if reason else None

    async def stop(self, grace: float) -> None:
        """SIGTERM to the group, then SIGKILL once the grace period is over."""
        if self._process is None or self._process.returncode is not None:
            return
        self.stop_requested = True
        self._signal_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self._process.wait()), timeout=grace)
        except TimeoutError:
            self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, sig)
