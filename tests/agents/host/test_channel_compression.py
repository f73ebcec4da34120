"""The agent's channel offers no permessage-deflate: its frames are small heartbeats, and a
server that compresses would spend CPU per frame and a zlib context per agent."""

from __future__ import annotations

import asyncio

from websockets.asyncio.server import ServerConnection, serve

from agents.protocol import Hello, Welcome
from tests.support.agent_channel import channel_to


async def test_the_channel_asks_for_no_compression() -> None:
    offered: list[str | None] = []
    negotiated: list[list[str]] = []
    done = asyncio.Event()

    async def server(websocket: ServerConnection) -> None:
        assert websocket.request is not None
        offered.append(websocket.request.headers.get("Sec-WebSocket-Extensions"))
        negotiated.append([e.name for e in websocket.protocol.extensions])
        Hello.model_validate_json(await websocket.recv())
        await websocket.send(Welcome(heartbeat_seconds=0.1).model_dump_json())
        done.set()
        await websocket.close()

    def hello() -> Hello:
        return Hello(name="plain", address="127.0.0.1", port_range=(1, 2), version="t")

    # This server would compress (websockets' default) if the agent offered it.
    async with serve(server, "127.0.0.1", 0) as listening:
        port = listening.sockets[0].getsockname()[1]
        running = asyncio.create_task(channel_to(port, hello).run_forever())
        await asyncio.wait_for(done.wait(), timeout=10)
        running.cancel()

    assert offered[0] is None and negotiated[0] == []
