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


class QuietSocket:
    def __init__(self) -> None:
        self.closed: tuple[int, str] | None = None

    async def send_text(self, _text: str) -> None:
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)


async def test_a_name_is_attached_to_one_identity_at_a_time() -> None:
    agents = hub.AgentHub()
    first = hub.AgentConnection(
        "host-a",
        QuietSocket(),  # type: ignore[arg-type]
        identity="first-identity-0000",
        address="10.0.0.5",
    )
    assert agents.attach(first) is None
    clone = hub.AgentConnection("host-a", QuietSocket(), identity="clone-identity-0000")  # type: ignore[arg-type]
    with pytest.raises(hub.NameTaken) as taken:
        agents.attach(clone)
    assert taken.value.connected is first and agents.connection("host-a") is first
    assert str(taken.value) == (
        "host-a is already connected from 10.0.0.5 with another identity; "
        "start this agent with another --name"
    )
    again = hub.AgentConnection("host-a", QuietSocket(), identity="first-identity-0000")  # type: ignore[arg-type]
    assert agents.attach(again) is first  # the same agent, reconnected: it replaces
    assert agents.connection("host-a") is again
    for connection in (first, clone, again):
        await connection.close()
