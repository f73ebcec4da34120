"""The training processes connected on the runtime channel, and the commands sent to them.

A runtime (agents.runtime.sender) holds one websocket to the server while its task runs. The
channel registers it here, so that a request (checkpoint now) can reach the task, and the
request can wait for the runtime's answer: a checkpoint report naming the command, or a
`command_failed`. Links live in this process only: after a server restart the runtimes
reconnect and register again; a command in flight across the restart is lost, and the
request that sent it times out.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from agents.protocol import Command

Send = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class CommandOutcome:
    """What became of a command: the checkpoint it produced (its row id), or why it failed."""

    checkpoint_id: int | None = None
    failure: str | None = None


@dataclass(eq=False)
class RuntimeLink:
    job_id: int
    task: str  # "chief:0"
    attempt: int
    send_text: Send
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, text: str) -> None:
        """Send a frame; acks from the channel and commands from requests never interleave."""
        async with self._lock:
            await self.send_text(text)


class RuntimeLinks:
    def __init__(self) -> None:
        self._links: dict[tuple[int, str], RuntimeLink] = {}
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[CommandOutcome]] = {}

    def attach(self, link: RuntimeLink) -> None:
        """The newest connection of a task wins (a reconnect replaces a dead socket)."""
        self._links[(link.job_id, link.task)] = link

    def detach(self, link: RuntimeLink) -> None:
        if self._links.get((link.job_id, link.task)) is link:
            del self._links[(link.job_id, link.task)]

    def find(self, job_id: int, task: str, attempt: int) -> RuntimeLink | None:
        link = self._links.get((job_id, task))
        return link if link is not None and link.attempt == attempt else None

    async def send_command(
        self,
        link: RuntimeLink,
        action: Literal["checkpoint", "interrupt"],
        *,
        hold_seconds: float = 0.0,
    ) -> tuple[int, asyncio.Future[CommandOutcome]]:
        """Send a command; the future resolves when the runtime answers it (see `resolve`)."""
        command_id = next(self._ids)
        future: asyncio.Future[CommandOutcome] = asyncio.get_running_loop().create_future()
        self._waiting[command_id] = future
        command = Command(id=command_id, action=action, hold_seconds=hold_seconds)
        try:
            await link.send(command.model_dump_json())
        except BaseException:
            self.forget(command_id)
            raise
        return command_id, future

    def resolve(self, command_id: int | None, outcome: CommandOutcome) -> None:
        if command_id is None:
            return
        future = self._waiting.pop(command_id, None)
        if future is not None and not future.done():
            future.set_result(outcome)

    def forget(self, command_id: int) -> None:
        """The requester stopped waiting (timeout, disconnect): drop its future."""
        future = self._waiting.pop(command_id, None)
        if future is not None and not future.done():
            future.cancel()
