"""An agent told to stop (SIGTERM, as Slurm does at a requeue) says so with the exits of its
tasks, so that the server can tell its allocation's end from the tasks' failures, and starts
nothing more."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agents.host.supervisor import Supervisor
from agents.protocol import AgentMessage, StartTask, TaskExit, TaskExited, TaskKey


def start(key: TaskKey, code: str) -> StartTask:
    return StartTask(
        key=key, argv=[sys.executable, "-c", code], working_dir=".", env={}, port=1, gpus=[]
    )


async def test_exits_after_the_agent_is_told_to_stop_say_so() -> None:
    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    sent: list[AgentMessage] = []

    def send(message: AgentMessage) -> bool:
        sent.append(message)
        if isinstance(message, TaskExited):
            exits.put_nowait(message.exit)
        return True

    supervisor = Supervisor(Path.cwd(), "http://server.test", send)
    failing = TaskKey(job_id=1, task="worker:0", attempt=0)
    await supervisor.start(start(failing, "raise SystemExit(3)"))
    failed = await asyncio.wait_for(exits.get(), timeout=60)
    assert (failed.key, failed.exit_code, failed.agent_stopping) == (failing, 3, False)

    serving = TaskKey(job_id=1, task="chief:0", attempt=0)
    await supervisor.start(start(serving, "import time; time.sleep(600)"))
    supervisor.stopping = True  # what the agent's SIGTERM handler does first
    await supervisor.stop_all(grace=10)
    stopped = await asyncio.wait_for(exits.get(), timeout=60)
    assert (stopped.key, stopped.agent_stopping) == (serving, True)

    late = TaskKey(job_id=2, task="chief:0", attempt=0)
    before = len(sent)
    await supervisor.start(start(late, "print('started')"))
    assert supervisor.running() == [] and sent[before:] == []  # nothing started, no exit
