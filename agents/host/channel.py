"""The agent's one websocket to the server: hello, heartbeats, commands, reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from agents.protocol import (
    KEEPALIVE_PING_SECONDS,
    KEEPALIVE_TIMEOUT_SECONDS,
    AgentMessage,
    CollectStacks,
    Heartbeat,
    HeartbeatPeriod,
    Hello,
    LogsAck,
    Refused,
    RunningTask,
    ServerMessage,
    StartTask,
    StopTask,
    Welcome,
    server_message,
)
from agents.tls import client_ssl

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 16 << 20
# No permessage-deflate: an agent's frames are mostly heartbeats of a few hundred bytes, and
# compressing each would cost the server CPU per frame and a zlib context per connected agent.
COMPRESSION = None
LOG_FLUSH_SECONDS = 0.1


class ChannelError(Exception):
    """The server spoke out of turn; reconnect and start over."""


def channel_url(server_url: str) -> str:
    scheme, sep, rest = server_url.rstrip("/").partition("://")
    if not sep or scheme not in ("http", "https", "ws", "wss"):
        raise ValueError(f"server URL {server_url!r} must start with http:// or https://")
    ws_scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    return f"{ws_scheme}://{rest}/agents/connect"


class Backoff:
    """Exponential backoff with full jitter, so that many agents do not reconnect in step.

    Attempt n waits a time drawn uniformly from [floor, min(ceiling, initial * 2**n)]: the
    whole window, not its upper half, so that agents cut off together (a server restart)
    spread their reconnects over all of it. The floor keeps a failing connect from looping
    without a pause; drawing from above it, rather than raising short draws to it, keeps
    the agents from meeting at the floor.
    """

    def __init__(
        self,
        initial: float = 0.5,
        ceiling: float = 10.0,
        floor: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        self.initial, self.ceiling, self.floor, self.attempts = initial, ceiling, floor, 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        # The exponent stops growing once the window is at the ceiling: 2**n for a large n
        # would not fit a float (an agent cut off for hours would die of OverflowError).
        window = self.initial * 2 ** min(self.attempts, 64)
        self.attempts += 1
        return self._rng.uniform(self.floor, max(self.floor, min(self.ceiling, window)))

    def reset(self) -> None:
        self.attempts = 0


class Channel:
    """Keeps one live connection; queued frames go out through a single writer."""

    def __init__(
        self,
        server_url: str,
        token: str,
        hello: Callable[[], Hello],
        on_start: Callable[[StartTask], Coroutine[Any, Any, None]],
        on_stop: Callable[[StopTask], Coroutine[Any, Any, None]],
        flush_logs: Callable[[], None],
        heartbeat: Callable[[], Heartbeat],
        on_logs_ack: Callable[[LogsAck], None],
        on_connected: Callable[[Welcome], None],
        ca_file: str | None = None,
        on_collect_stacks: Callable[[CollectStacks], None] | None = None,
    ) -> None:
        self.url = channel_url(server_url)
        self._ssl = client_ssl(self.url, ca_file)
        self._token = token
        self._hello = hello
        self._on_start = on_start
        self._on_stop = on_stop
        self._flush_logs = flush_logs
        self._heartbeat = heartbeat
        self._on_logs_ack = on_logs_ack
        self._on_connected = on_connected
        self._on_collect_stacks = on_collect_stacks
        self._outbox: asyncio.Queue[AgentMessage] | None = None
        self._period = 1.0  # seconds between heartbeats: welcome's, then heartbeat_period's
        self._background: set[asyncio.Task[None]] = set()
        self.connected = asyncio.Event()
        self.refused: str | None = None

    def send(self, message: AgentMessage) -> bool:
        """Queue a frame if connected. False when down: callers keep what must survive."""
        if self._outbox is None:
            return False
        self._outbox.put_nowait(message)
        return True

    async def run_forever(self) -> None:
        backoff = Backoff()
        while self.refused is None:
            try:
                async with connect(
                    self.url,
                    additional_headers={"Authorization": f"Bearer {self._token}"},
                    ssl=self._ssl,
                    max_size=MAX_FRAME_BYTES,
                    compression=COMPRESSION,
                    open_timeout=10,
                    ping_interval=KEEPALIVE_PING_SECONDS,
                    ping_timeout=KEEPALIVE_TIMEOUT_SECONDS,
                ) as websocket:
                    await self._session(websocket, backoff)
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError, ChannelError) as exc:
                log.warning("channel to %s down: %s", self.url, exc or type(exc).__name__)
            except InvalidURI as exc:
                raise ValueError(f"bad server URL: {exc}") from exc
            finally:
                self._outbox = None
                self.connected.clear()
            if self.refused is None:
                await asyncio.sleep(backoff.next())

    async def _session(self, websocket: ClientConnection, backoff: Backoff) -> None:
        hello = self._hello()
        await websocket.send(hello.model_dump_json())
        try:
            async with asyncio.timeout(30):
                raw = await websocket.recv()
            first = server_message.validate_json(raw)
        except ValidationError as exc:
            raise ChannelError(f"unreadable first frame: {exc}") from exc
        if isinstance(first, Refused):
            self.refused = first.reason
            log.error("server refused this agent: %s", first.reason)
            return
        if not isinstance(first, Welcome):
            raise ChannelError(f"expected welcome, got {first.type}")
        backoff.reset()
        self._outbox = asyncio.Queue()  # before on_connected, which may send
        self._on_connected(first)
        self._period = first.heartbeat_seconds
        self.connected.set()
        log.info("connected to %s", self.url)
        async with asyncio.TaskGroup() as group:
            reader = group.create_task(self._read(websocket))
            writer = group.create_task(self._write(websocket, self._outbox))
            beats = group.create_task(self._beat(hello.running))
            await asyncio.wait([reader, writer], return_when=asyncio.FIRST_COMPLETED)
            for task in (reader, writer, beats):
                task.cancel()

    async def _read(self, websocket: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in websocket:
                try:
                    message: ServerMessage = server_message.validate_json(raw)
                except ValidationError as exc:
                    log.error("ignoring a frame the server should not send: %s", exc)
                    continue
                if isinstance(message, LogsAck):
                    self._on_logs_ack(message)
                elif isinstance(message, HeartbeatPeriod):
                    self._period = message.heartbeat_seconds
                elif isinstance(message, StartTask):
                    await self._on_start(message)
                elif isinstance(message, CollectStacks):
                    if self._on_collect_stacks is not None:
                        self._on_collect_stacks(message)
                elif isinstance(message, StopTask):
                    # Stopping waits out a grace period; keep reading meanwhile.
                    task = asyncio.create_task(self._on_stop(message))
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)

    async def _write(
        self, websocket: ClientConnection, outbox: asyncio.Queue[AgentMessage]
    ) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await websocket.send((await outbox.get()).model_dump_json())

    async def _beat(self, listed: list[RunningTask]) -> None:
        """Heartbeats every `_period`, each leaving out the running list when it is the one
        last listed on this connection (`listed`: the hello's, at first)."""
        while True:
            self._flush_logs()
            beat = self._heartbeat()
            if self.send(beat.since(listed)):
                listed = beat.running
            # Logs go out every 100 ms; heartbeats every `_period`, as the server said last.
            ticks = 0
            while ticks < max(1, round(self._period / LOG_FLUSH_SECONDS)):
                await asyncio.sleep(LOG_FLUSH_SECONDS)
                self._flush_logs()
                ticks += 1
