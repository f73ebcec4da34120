"""Spawning the agent's task processes: the environment every one inherits from the agent, the
tie that ends it with the agent, and the protocol that reads its output and sees its exit.

A cold start (agents.host.launcher) and a warm process (agents.host.warm_pool) are started
alike, so that a task cannot tell one from the other by what it inherited. Each leads a process
group of its own (how it is signalled) but stays in the agent's session: where the kernel has
autogroups, a session is also a CPU scheduling group, and one per task would split the CPU
between a job's tasks per process rather than per thread (docs/benchmarks.md puts a figure on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
from collections.abc import Callable, Mapping

PR_SET_PDEATHSIG = 1
PYTHON_NAMES = frozenset({"python", "python3"})  # argv[0]s that mean "the task's Python"
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


def inherited_env(inherited: Mapping[str, str]) -> dict[str, str]:
    """What every task process gets of the agent's environment: all of it but the
    credentials, with unbuffered output unless the agent says otherwise (lines reach the log
    as they are printed)."""
    env = {k: v for k, v in inherited.items() if k not in WITHHELD_ENV}
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # If the agent itself is killed, the kernel sends the task SIGKILL: no orphaned servers.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class OutputProtocol(asyncio.SubprocessProtocol):
    """Output as it comes, and the main process's exit as soon as it is reaped: asyncio's own
    ``Process.wait`` also waits for the pipes, which a descendant can hold open for ever."""

    def __init__(self, on_data: Callable[[int, bytes], None]) -> None:
        loop = asyncio.get_running_loop()
        self._on_data = on_data
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: dict[int, asyncio.Future[None]] = {
            1: loop.create_future(),
            2: loop.create_future(),
        }

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._on_data(fd, data)

    def redirect(self, on_data: Callable[[int, bytes], None]) -> None:
        """Output from now on goes to ``on_data`` (a warm process handed to its attempt)."""
        self._on_data = on_data

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in self.closed and not self.closed[fd].done():
            self.closed[fd].set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)
