"""An agent's `Channel` to a test's own websocket server, doing nothing with what it is told."""

from __future__ import annotations

from collections.abc import Callable

from agents.host.channel import Channel
from agents.protocol import Heartbeat, Hello, LogsAck, StartTask, StopTask


async def _ignore_start(_: StartTask) -> None: ...


async def _ignore_stop(_: StopTask) -> None: ...


def _ignore_ack(_: LogsAck) -> None: ...


def channel_to(
    port: int, hello: Callable[[], Hello], heartbeat: Callable[[], Heartbeat] = Heartbeat
) -> Channel:
    return Channel(
        f"http://127.0.0.1:{port}",
        "token",
        hello,
        _ignore_start,
        _ignore_stop,
        flush_logs=lambda: None,
        heartbeat=heartbeat,
        on_logs_ack=_ignore_ack,
        on_connected=lambda _welcome: None,
    )
