"""The tasks this agent runs: starting, stopping, watching, and remembering how they ended."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agents.host.launcher import LaunchError, TaskProcess
from agents.protocol import (
    MAX_LOG_BATCH,
    AgentMessage,
    RunningTask,
    StartTask,
    StopTask,
    TaskExit,
    TaskExited,
    TaskKey,
    TaskLogs,
    TaskStarted,
)

log = logging.getLogger(__name__)

FINISHED_KEPT = 200  # exits remembered for the next hello, in case the channel was down
LOG_BUFFER_LINES = 20_000  # per task while the server is unreachable; older lines are dropped


@dataclass
class LogBuffer:
    """Lines not yet sent, numbered so the server can drop duplicates and see gaps."""

    next_line: int = 0  # number of the first line in `lines`
    lines: list[str] = field(default_factory=list)

    def add(self, lines: list[str]) -> None:
        self.lines.extend(lines)
        overflow = len(self.lines) - LOG_BUFFER_LINES
        if overflow > 0:
            del self.lines[:overflow]
            self.next_line += overflow

    def take(self) -> tuple[int, list[str]]:
        batch = self.lines[:MAX_LOG_BATCH]
        return self.next_line, batch

    def sent(self, count: int) -> None:
        del self.lines[:count]
        self.next_line += count


class Supervisor:
    def __init__(
        self, workspace: Path, server_url: str, send: Callable[[AgentMessage], bool]
    ) -> None:
        self.workspace = workspace
        self.server_url = server_url
        self._send = send
        self._tasks: dict[TaskKey, TaskProcess] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._logs: dict[TaskKey, LogBuffer] = {}
        self.finished: OrderedDict[TaskKey, TaskExit] = OrderedDict()

    def running(self) -> list[RunningTask]:
        return [RunningTask(key=k, pid=t.pid) for k, t in self._tasks.items()]

    async def start(self, command: StartTask) -> None:
        key = command.key
        if key in self._tasks or key in self.finished:
            return  # a resent start: this attempt already runs, or already ran
        process = TaskProcess(key, self._collect_lines)
        self._logs[key] = LogBuffer()
        try:
            await process.spawn(command, self.workspace, self.server_url)
        except LaunchError as exc:
            log.warning("cannot start %s of job %s: %s", key.task, key.job_id, exc)
            self._finish(TaskExit(key=key, exit_code=None, error=str(exc)))
            return
        self._tasks[key] = process
        log.info(
            "started %s of job %s (attempt %s, pid %s)",
            key.task,
            key.job_id,
            key.attempt,
            process.pid,
        )
        self._send(TaskStarted(key=key, pid=process.pid))
        watcher = asyncio.create_task(self._watch(process))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def stop(self, command: StopTask) -> None:
        process = self._tasks.get(command.key)
        if process is not None:
            log.info(
                "stopping %s of job %s: %s", command.key.task, command.key.job_id, command.reason
            )
            await process.stop(command.grace_seconds)

    async def stop_all(self, grace: float) -> None:
        await asyncio.gather(*(p.stop(grace) for p in list(self._tasks.values())))
        await asyncio.gather(*list(self._watchers), return_exceptions=True)

    async def _watch(self, process: TaskProcess) -> None:
        exit = await process.wait()
        del self._tasks[process.key]
        log.info(
            "%s of job %s exited: code %s", process.key.task, process.key.job_id, exit.exit_code
        )
        self._finish(exit)

    def _finish(self, exit: TaskExit) -> None:
        self.flush_logs(exit.key)  # the last lines travel before the exit
        self.finished[exit.key] = exit
        while len(self.finished) > FINISHED_KEPT:
            self.finished.popitem(last=False)
        self._send(TaskExited(exit=exit))

    def _collect_lines(self, key: TaskKey, lines: list[str]) -> None:
        self._logs.setdefault(key, LogBuffer()).add(lines)

    def flush_logs(self, only: TaskKey | None = None) -> None:
        """Send buffered lines; what cannot be sent now stays buffered for the next try."""
        for key, buffer in list(self._logs.items()):
            if only is not None and key != only:
                continue
            while buffer.lines:
                first, batch = buffer.take()
                if not self._send(TaskLogs(key=key, first_line=first, lines=batch)):
                    break
                buffer.sent(len(batch))
            if not buffer.lines and key not in self._tasks and key in self.finished:
                del self._logs[key]
