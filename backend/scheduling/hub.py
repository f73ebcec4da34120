"""Live agent connections: one per host name, each with its own send queue.

Senders never wait on an agent: messages go into the connection's queue and a writer task
drains it. A connection whose queue overflows is closed; the agent reconnects and the
controller resynchronises it from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import WebSocket

from agents.protocol import ServerMessage
from backend.hosts.names import admit_hello

log = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000
TRY_AGAIN_LATER = 1013  # websocket close code: the agent reconnects


class AgentConnection:
    def __init__(
        self,
        host_name: str,
        websocket: WebSocket,
        *,
        identity: str | None = None,
        address: str = "",
        bound_job: int | None = None,
    ) -> None:
        self.host_name = host_name
        self.websocket = websocket
        self.identity = identity  # the agent's persistent identity (Hello.identity)
        self.address = address  # where it connected from
        # The job whose allocation started this agent (Slurm: its token names the job). Only
        # that job's tasks are placed on it, and no other job's.
        self.bound_job = bound_job
        # It said it is stopping (an exit with agent_stopping): no new task goes there.
        self.leaving = False
        # Task attempts this agent has been found to run: their logs are its to send.
        self.own_attempts: set[tuple[int, str, int]] = set()
        # Its welcome is queued: what is sent to every agent may be sent to it (the
        # welcome must be its first frame).
        self.welcomed = False
        self._queue: asyncio.Queue[ServerMessage | None] = asyncio.Queue(QUEUE_LIMIT)
        # Started by the first message: a connection refused before it is sent anything
        # (a name taken, a clash) leaves no task behind.
        self._writer: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    def send(self, message: ServerMessage) -> bool:
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name=f"agent-writer-{self.host_name}")
        try:
            self._queue.put_nowait(message)
        except asyncio.QueueFull:
            if self._closing is None:
                log.warning("agent %s is not reading; closing its channel", self.host_name)
                # Closed, not just left unwritten: the agent reconnects and its hello
                # resynchronises it, where a silent socket would drop every later command.
                self._closing = asyncio.create_task(
                    self.close(TRY_AGAIN_LATER, f"over {QUEUE_LIMIT} commands unread")
                )
            return False
        return True

    async def _write(self) -> None:
        while (message := await self._queue.get()) is not None:
            await self.websocket.send_text(message.model_dump_json())

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self._writer is not None:
            self._writer.cancel()
        with contextlib.suppress(Exception):
            await self.websocket.close(code=code, reason=reason)

    async def drain(self) -> None:
        """Wait until everything queued so far has been written (used before closing)."""
        if self._writer is None:
            return  # nothing was ever queued
        await self._queue.put(None)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._writer


class NameTaken(Exception):
    """Another agent (another identity) is connected under this host name; the message says
    so, for the refused agent to print."""

    def __init__(self, connected: AgentConnection, reason: str) -> None:
        super().__init__(reason)
        self.connected = connected


class AgentHub:
    def __init__(self) -> None:
        self._connections: dict[str, AgentConnection] = {}
        self.changes = 0  # attaches and detaches so far: the set of connected hosts changed

    def attach(self, connection: AgentConnection) -> AgentConnection | None:
        """Register a connection; returns the one it replaces (the same agent, reconnected).
        Raises NameTaken, leaving the connected one alone, when an agent with another
        identity holds the name. (No await between the check and the change: two agents
        saying hello at once cannot both pass.)"""
        name, previous = connection.host_name, self._connections.get(connection.host_name)
        if (clash := admit_hello(name, connection.identity, connected=previous)) is not None:
            assert previous is not None  # only a connected agent clashes here
            raise NameTaken(previous, clash)
        self._connections[connection.host_name] = connection
        self.changes += 1
        return previous

    def detach(self, connection: AgentConnection) -> None:
        if self._connections.get(connection.host_name) is connection:
            del self._connections[connection.host_name]
            self.changes += 1

    def send(self, host_name: str, message: ServerMessage) -> bool:
        connection = self._connections.get(host_name)
        return connection is not None and connection.send(message)

    def send_all(self, message: ServerMessage) -> None:
        """Send to every connected agent that has been welcomed."""
        for connection in self._connections.values():
            if connection.welcomed:
                connection.send(message)

    def connection(self, host_name: str) -> AgentConnection | None:
        return self._connections.get(host_name)

    def connected(self, host_name: str) -> bool:
        return host_name in self._connections

    def takes_tasks(self, host_name: str) -> bool:
        """Whether new tasks may be placed there: connected, and not stopping."""
        connection = self._connections.get(host_name)
        return connection is not None and not connection.leaving

    def mark_leaving(self, host_name: str) -> None:
        connection = self._connections.get(host_name)
        if connection is not None and not connection.leaving:
            connection.leaving = True
            self.changes += 1  # what placement may use changed, as at a detach

    def bound_job(self, host_name: str) -> int | None:
        """The job a connected agent was started for (None: any job's tasks may go there)."""
        connection = self._connections.get(host_name)
        return None if connection is None else connection.bound_job

    def count(self) -> int:
        return len(self._connections)

    async def close_all(self) -> None:
        for connection in list(self._connections.values()):
            await connection.close(1001, "server shutting down")
        self._connections.clear()
