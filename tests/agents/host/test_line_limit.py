"""The agent cuts its tasks' log lines where the server does: the limit comes in `welcome`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.host.supervisor import Supervisor
from agents.protocol import (
    MAX_LOG_LINE,
    AgentMessage,
    StartTask,
    TaskExited,
    TaskKey,
    TaskLogs,
    Welcome,
    server_message,
)


def test_welcome_carries_the_servers_line_limit_and_defaults_to_the_protocols() -> None:
    welcome = server_message.validate_json('{"type": "welcome", "heartbeat_seconds": 1}')
    assert isinstance(welcome, Welcome) and welcome.max_log_line_chars == MAX_LOG_LINE
    sent = Welcome(heartbeat_seconds=1, max_log_line_chars=1000).model_dump_json()
    assert server_message.validate_json(sent) == Welcome(
        heartbeat_seconds=1, max_log_line_chars=1000
    )
    # At its default it is left out, so that an agent that predates the field reads the welcome.
    assert json.loads(Welcome(heartbeat_seconds=1).model_dump_json()) == {
        "type": "welcome",
        "heartbeat_seconds": 1.0,
    }
    with pytest.raises(ValidationError):
        Welcome(heartbeat_seconds=1, max_log_line_chars=65_537)


@pytest.mark.parametrize("limit", [300, 20_000])
async def test_the_agent_cuts_task_lines_at_the_limit_of_the_welcome(limit: int) -> None:
    sent: list[AgentMessage] = []

    def send(message: AgentMessage) -> bool:
        sent.append(message)
        return True

    supervisor = Supervisor(Path.cwd(), "http://server.test", send)
    supervisor.reconnected(Welcome(heartbeat_seconds=1, max_log_line_chars=limit))
    key = TaskKey(job_id=1, task="chief:0", attempt=0)
    code = "print('z' * 30000); print('short')"
    await supervisor.start(
        StartTask(
            key=key, argv=[sys.executable, "-c", code], working_dir=".", env={}, port=1, gpus=[]
        )
    )
    for _ in range(300):
        if any(isinstance(m, TaskExited) for m in sent):
            break
        await asyncio.sleep(0.05)
    supervisor.flush_logs()
    lines = [line for m in sent if isinstance(m, TaskLogs) for line in m.lines]
    # However the pipe chunks it, no line is longer than the limit, and none is cut shorter.
    assert max(len(line) for line in lines) == limit
    assert lines[-1] == "short"
