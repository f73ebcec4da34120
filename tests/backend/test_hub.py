"""The hub's connections: an agent that stops reading its commands is disconnected, so that
it reconnects and is resynchronised, instead of silently missing every later command."""

from __future__ import annotations

import asyncio

import pytest

from agents.protocol import StopTask, TaskKey
from backend.scheduling import hub


class StuckSocket:
    """A websocket whose peer never reads: writes wait forever; close is recorded."""

    def __init__(self) -> None:
        self.closed: tuple[int, str] | None = None

    async def send_text(self, _text: str) -> None:
        await asyncio.Event().wait()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)


async def test_an_agent_that_does_not_read_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "QUEUE_LIMIT", 3)
    socket = StuckSocket()
    connection = hub.AgentConnection("host-a", socket)  # type: ignore[arg-type]
    stop = StopTask(key=TaskKey(job_id=1, task="chief:0", attempt=0), grace_seconds=1, reason="x")
    # Sent with no await between: the writer has not taken any yet, so three fit.
    sent = [connection.send(stop) for _ in range(5)]
    await asyncio.sleep(0.05)
    assert sent == [True, True, True, False, False]
    assert socket.closed == (hub.TRY_AGAIN_LATER, "over 3 commands unread")
