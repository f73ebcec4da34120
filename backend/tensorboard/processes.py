"""TensorBoard processes: started on demand, shared by their users, stopped when idle.

A board serves one job's event files (``<checkpoint dir>/tensorboard``, one run per task) or
several jobs' side by side (a run per job and task, ``job3/chief-0``). It listens on
127.0.0.1 at a port the OS picks (TensorBoard prints it), under the path prefix at which
Strata proxies it, so its pages and data URLs work unchanged behind the proxy. At most
`limit` run at once: one more is a `Conflict` naming the setting. Every proxied request
touches its board; `reap()` stops those nobody touched for `idle_seconds`, and those whose
process died, so a dead board is started again on the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from backend.errors import Conflict, DomainError
from backend.tensorboard.serve import PARENT_ENV

log = logging.getLogger(__name__)

_LISTENING = re.compile(r"TensorBoard \S+ at http://127\.0\.0\.1:(\d+)/")
STOP_GRACE = 5.0
LOG_TAIL = 2000


class BoardFailed(DomainError):
    """A TensorBoard process did not start serving."""

    status_code = 502


@dataclass(frozen=True)
class BoardSpec:
    """What one board serves, and where."""

    key: str  # "job-3", "compare-3-5": also its log file's name
    prefix: str  # the URL path it is proxied at, without the trailing slash
    runs: tuple[tuple[str, Path], ...]  # (name, logdir); one unnamed run: the job's own view

    def arguments(self) -> list[str]:
        for name, path in self.runs:
            # --logdir_spec separates runs by commas and names from paths by the first colon.
            if "," in str(path) or ":" in name or "," in name:
                raise Conflict(f"TensorBoard cannot serve the path {str(path)!r} (a comma)")
        if len(self.runs) == 1 and not self.runs[0][0]:
            logdir = ["--logdir", str(self.runs[0][1])]
        else:
            logdir = ["--logdir_spec", ",".join(f"{name}:{path}" for name, path in self.runs)]
        return [
            *logdir,
            *("--host", "127.0.0.1", "--port", "0", "--path_prefix", self.prefix),
            *("--reload_interval", "5"),
        ]


@dataclass
class Board:
    spec: BoardSpec
    process: asyncio.subprocess.Process
    port: int
    last_used: float
    log_path: Path = field(repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


class TensorBoards:
    """The server's running boards (one per app; see the module docstring)."""

    def __init__(
        self,
        *,
        limit: int,
        idle_seconds: float,
        start_seconds: float,
        log_dir: Path,
        clock: Callable[[], float] = time.monotonic,
        python: str = sys.executable,
    ) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.start_seconds = start_seconds
        self.log_dir = log_dir
        self._clock = clock
        self._python = python
        self._boards: dict[str, Board] = {}
        self._starting: dict[str, asyncio.Task[Board]] = {}
        self._lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client the proxy talks to the boards with."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0))
        return self._client

    def running(self) -> list[Board]:
        return [board for board in self._boards.values() if board.alive]

    async def open(self, spec: BoardSpec) -> Board:
        """The running board for `spec`, started (and waited for) when there is none."""
        async with self._lock:
            board = self._boards.get(spec.key)
            if board is not None and board.alive:
                board.last_used = self._clock()
                return board
            if board is not None:
                del self._boards[spec.key]  # it died: start it again
            starting = self._starting.get(spec.key)
            if starting is None and self.limit == 0:
                raise Conflict("TensorBoard is off on this server (STRATA_TENSORBOARD_MAX=0)")
            if starting is None:
                busy = len(self.running()) + len(self._starting)
                if busy >= self.limit:
                    in_use = ", ".join(sorted([*self._boards, *self._starting])) or "none"
                    raise Conflict(
                        f"{busy} TensorBoards are running, the most this server runs at once "
                        f"(STRATA_TENSORBOARD_MAX={self.limit}; in use: {in_use}); one stops "
                        f"after {self.idle_seconds:g} s unused (STRATA_TENSORBOARD_IDLE_SECONDS)"
                    )
                starting = asyncio.create_task(self._start(spec), name=f"tensorboard {spec.key}")
                self._starting[spec.key] = starting
        try:
            # Shielded: a client that gives up does not stop a start others may be waiting on.
            board = await asyncio.shield(starting)
        finally:
            async with self._lock:
                if self._starting.get(spec.key) is starting and starting.done():
                    del self._starting[spec.key]
                    if not starting.cancelled() and starting.exception() is None:
                        self._boards[spec.key] = starting.result()
        board.last_used = self._clock()
        return board

    async def _start(self, spec: BoardSpec) -> Board:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.key}.log"
        with log_path.open("wb") as output:
            process = await asyncio.create_subprocess_exec(
                self._python,
                "-m",
                "backend.tensorboard.serve",
                *spec.arguments(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, PARENT_ENV: str(os.getpid())},  # it exits when we are gone
            )
        log.info("TensorBoard %s starting (pid %d)", spec.key, process.pid)
        try:
            return await self._await_serving(spec, process, log_path)
        except BaseException:
            await _stop(process)  # it failed, or the server is stopping
            raise

    async def _await_serving(
        self, spec: BoardSpec, process: asyncio.subprocess.Process, log_path: Path
    ) -> Board:
        deadline = self._clock() + self.start_seconds
        while True:
            found = _LISTENING.search(_tail(log_path))
            if found is not None:
                return Board(spec, process, int(found[1]), self._clock(), log_path)
            if process.returncode is not None:
                raise BoardFailed(
                    f"TensorBoard for {spec.key} exited with {process.returncode} before "
                    f"serving: {_tail(log_path, LOG_TAIL).strip()[-LOG_TAIL:]}"
                )
            if self._clock() > deadline:
                raise BoardFailed(
                    f"TensorBoard for {spec.key} did not serve within {self.start_seconds:g} s "
                    "(STRATA_TENSORBOARD_START_SECONDS)"
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.1):
                    await process.wait()

    async def reap(self) -> list[str]:
        """Stops the boards idle for `idle_seconds` and forgets dead ones; their keys."""
        now = self._clock()
        async with self._lock:
            done = [
                key
                for key, board in self._boards.items()
                if not board.alive or now - board.last_used >= self.idle_seconds
            ]
            boards = [self._boards.pop(key) for key in done]
        for board in boards:
            if board.alive:
                log.info(
                    "TensorBoard %s stopped after %g s unused",
                    board.spec.key,
                    now - board.last_used,
                )
            await _stop(board.process)
        return done

    async def run(self, interval: float = 5.0) -> None:
        """Reaps every `interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap()
            except Exception:
                log.exception("reaping TensorBoards failed")

    async def close(self) -> None:
        """Stops every board (the server is stopping)."""
        async with self._lock:
            boards = list(self._boards.values())
            self._boards.clear()
            starting = list(self._starting.values())
        for task in starting:
            task.cancel()
            with contextlib.suppress(BaseException):
                board = await task
                boards.append(board)
        for board in boards:
            await _stop(board.process)
        if self._client is not None:
            await self._client.aclose()
            self._client = None


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        async with asyncio.timeout(STOP_GRACE):
            await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


def _tail(path: Path, size: int = 64 << 10) -> str:
    try:
        with path.open("rb") as file:
            file.seek(0, 2)
            file.seek(max(0, file.tell() - size))
            return file.read().decode(errors="replace")
    except OSError:
        return ""
