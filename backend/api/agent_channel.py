"""The agent channel: one websocket per agent, typed messages both ways."""

from __future__ import annotations

import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from agents.protocol import (
    Heartbeat,
    Hello,
    LogsAck,
    TaskExited,
    TaskLogs,
    TaskStarted,
    agent_message,
)
from backend.api.deps import websocket_principal
from backend.api.frames import close, first_frame, next_frame
from backend.auth import TokenKind
from backend.scheduling.controller import Controller
from backend.scheduling.hub import AgentConnection, AgentHub

router = APIRouter()
log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 4 << 20


@router.websocket("/agents/connect")
async def agent_channel(websocket: WebSocket) -> None:
    await websocket.accept()
    principal = websocket_principal(websocket)
    if principal is None or principal.kind is not TokenKind.agent:
        await close(websocket, 1008, "an agent token is required")
        return
    hello = await first_frame(websocket, agent_message, "hello")
    if hello is None:
        return
    if not isinstance(hello, Hello):
        await close(websocket, 1008, f"the first frame must be hello, got {hello.type}")
        return

    hub: AgentHub = websocket.app.state.hub
    controller: Controller = websocket.app.state.controller
    connection = AgentConnection(hello.name, websocket)
    replaced = hub.attach(connection)
    if replaced is not None:
        await replaced.close(1000, "replaced by a newer connection from the same agent")
    log.info("agent %s joined from %s", hello.name, hello.address)
    try:
        for reply in await controller.on_hello(hello):
            connection.send(reply)
        while (incoming := await next_frame(websocket, agent_message, MAX_FRAME_BYTES)) is not None:
            await _dispatch(controller, connection, incoming)
    except WebSocketDisconnect:
        pass
    finally:
        hub.detach(connection)
        await connection.close()
        log.info("agent %s disconnected", hello.name)


async def _dispatch(controller: Controller, connection: AgentConnection, message: object) -> None:
    host = connection.host_name
    controller.heard_from(host)
    if isinstance(message, Heartbeat):
        await controller.on_heartbeat(host, message.running)
    elif isinstance(message, TaskStarted):
        await controller.on_task_started(host, message.key, message.pid)
    elif isinstance(message, TaskExited):
        await controller.on_task_exited(host, message.exit)
    elif isinstance(message, TaskLogs):
        key = message.key
        logs = controller.logs
        logs.append(key.job_id, key.task, key.attempt, message.first_line, message.lines)
        # Written (the file is flushed on close): the agent may now forget these lines.
        connection.send(
            LogsAck(key=key, next_line=logs.received(key.job_id, key.task, key.attempt))
        )
    elif isinstance(message, Hello):
        raise WebSocketDisconnect(1008, "hello may only be sent once")
