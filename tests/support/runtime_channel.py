"""Talking to a test app's runtime channel (/tasks/connect) as a training process would."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient
from starlette.testclient import WebSocketTestSession

from agents.protocol import TaskHello, runtime_server_message


def task_token(client: TestClient, job_id: int) -> dict[str, str]:
    """The Authorization header of a task of this job."""
    token = client.app.state.tokens.task_token(job_id)  # type: ignore[attr-defined]
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def runtime(
    client: TestClient, job_id: int, task: str = "chief:0"
) -> Iterator[WebSocketTestSession]:
    """A runtime connection that has said task_hello (the welcome is still to be read)."""
    with client.websocket_connect("/tasks/connect", headers=task_token(client, job_id)) as ws:
        ws.send_text(TaskHello(task=task, attempt=0).model_dump_json())
        yield ws


def reply(ws: WebSocketTestSession) -> object:
    """The server's next frame on the runtime channel, parsed."""
    return runtime_server_message.validate_json(ws.receive_text())
