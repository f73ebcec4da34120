"""The agent's heartbeats leave out a running list that is the one it last listed."""

from __future__ import annotations

import asyncio
import time

from websockets.asyncio.server import ServerConnection, serve

from agents.protocol import (
    Heartbeat,
    HeartbeatPeriod,
    Hello,
    RunningTask,
    TaskKey,
    Welcome,
)
from tests.support.agent_channel import channel_to

CHIEF = RunningTask(key=TaskKey(job_id=1, task="chief:0", attempt=0), pid=10)
WORKER = RunningTask(key=TaskKey(job_id=1, task="worker:0", attempt=0), pid=11)


async def test_an_unchanged_list_is_left_out_and_a_changed_one_sent_whole() -> None:
    # What the agent runs at each heartbeat; the hello lists the first.
    plan = [[CHIEF], [CHIEF], [CHIEF, WORKER], [CHIEF, WORKER], [], []]
    sent: list[Heartbeat] = []
    hellos: list[Hello] = []
    done = asyncio.Event()

    async def server(websocket: ServerConnection) -> None:
        hellos.append(Hello.model_validate_json(await websocket.recv()))
        await websocket.send(Welcome(heartbeat_seconds=0.1).model_dump_json())
        async for raw in websocket:
            sent.append(Heartbeat.model_validate_json(raw))
            if len(sent) == len(plan):
                done.set()
                await websocket.close()

    made = 0

    def heartbeat() -> Heartbeat:
        nonlocal made
        made += 1
        return Heartbeat(running=plan[min(made - 1, len(plan) - 1)])

    def hello() -> Hello:
        return Hello(
            name="beating", address="127.0.0.1", port_range=(1, 2), version="t", running=plan[0]
        )

    async with serve(server, "127.0.0.1", 0) as listening:
        port = listening.sockets[0].getsockname()[1]
        channel = channel_to(port, hello, heartbeat)
        running = asyncio.create_task(channel.run_forever())
        await asyncio.wait_for(done.wait(), timeout=10)
        running.cancel()

    said = [(beat.running_unchanged, beat.running) for beat in sent]
    assert said == [
        (True, []),  # as the hello listed
        (True, []),
        (False, [CHIEF, WORKER]),
        (True, []),
        (False, []),  # now runs nothing: said in full, once
        (True, []),
    ]


def test_since_leaves_out_only_the_same_list() -> None:
    beat = Heartbeat(running=[CHIEF])
    assert beat.since(None) is beat
    assert beat.since([WORKER]) is beat
    assert beat.since([CHIEF]) == Heartbeat(running_unchanged=True)


async def test_the_agent_beats_at_the_period_the_server_says_last() -> None:
    beats: list[float] = []
    done = asyncio.Event()

    async def server(websocket: ServerConnection) -> None:
        await websocket.recv()  # hello
        await websocket.send(Welcome(heartbeat_seconds=30).model_dump_json())
        await websocket.recv()  # the first heartbeat goes out at once
        await websocket.send(HeartbeatPeriod(heartbeat_seconds=0.1).model_dump_json())
        async for _ in websocket:
            beats.append(time.monotonic())
            if len(beats) == 4:
                done.set()
                await websocket.close()

    def hello() -> Hello:
        return Hello(name="paced", address="127.0.0.1", port_range=(1, 2), version="t")

    async with serve(server, "127.0.0.1", 0) as listening:
        port = listening.sockets[0].getsockname()[1]
        channel = channel_to(port, hello, lambda: Heartbeat(running=[]))
        running = asyncio.create_task(channel.run_forever())
        # At the welcome's 30 s, the second heartbeat would come after 30 s.
        await asyncio.wait_for(done.wait(), timeout=10)
        running.cancel()
    assert len(beats) == 4
