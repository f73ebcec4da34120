"""An agent the server refuses (another protocol version) stops instead of reconnecting."""

from __future__ import annotations

import asyncio

from websockets.asyncio.server import ServerConnection, serve

from agents.protocol import Hello, Refused
from tests.support.agent_channel import channel_to


async def test_a_refused_agent_gives_up_with_the_servers_reason() -> None:
    hellos: list[Hello] = []
    reason = "agent protocol 1 is not this server's 2: run the same Strata version"

    async def server(websocket: ServerConnection) -> None:
        hellos.append(Hello.model_validate_json(await websocket.recv()))
        await websocket.send(Refused(reason=reason).model_dump_json())
        await websocket.close(1008, reason)

    def hello() -> Hello:
        return Hello(name="refused-host", address="127.0.0.1", port_range=(1, 2), version="t")

    async with serve(server, "127.0.0.1", 0) as listening:
        port = listening.sockets[0].getsockname()[1]
        channel = channel_to(port, hello)
        await asyncio.wait_for(channel.run_forever(), timeout=10)
    assert channel.refused == reason
    assert [h.name for h in hellos] == ["refused-host"]  # once: no reconnect after a refusal
