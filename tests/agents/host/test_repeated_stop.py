"""A stop is one SIGTERM to each process of the attempt, and a stop the server sends again while
the attempt is stopping changes nothing: the attempt keeps the grace the first one gave it (a
sidecar evaluator spends it on its last evaluation; to it a second SIGTERM means "now")."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from agents.host.supervisor import Supervisor
from agents.protocol import AgentMessage, StartTask, StopTask, TaskExited, TaskKey, TaskLogs

KEY = TaskKey(job_id=1, task="evaluator:0", attempt=0)

# Counts the SIGTERMs it gets; after the first it works on for a second, then exits 0.
SCRIPT = """
import signal, sys, time
received = 0
def on_term(signum, frame):
    global received
    received += 1
    print(f"sigterm {received}", flush=True)
    if received > 1:
        sys.exit(3)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while not received:
    time.sleep(0.01)
time.sleep(1.0)
print("finished its last work", flush=True)
"""


@pytest.mark.parametrize("stops", [1, 2])
async def test_a_stop_sends_one_sigterm_however_often_it_comes(stops: int) -> None:
    sent: list[AgentMessage] = []

    def send(message: AgentMessage) -> bool:
        sent.append(message)
        return True

    def lines() -> list[str]:
        supervisor.flush_logs()
        return [line for m in sent if isinstance(m, TaskLogs) for line in m.lines]

    supervisor = Supervisor(Path.cwd(), "http://server.test", send)
    await supervisor.start(
        StartTask(
            key=KEY, argv=[sys.executable, "-c", SCRIPT], working_dir=".", env={}, port=1, gpus=[]
        )
    )
    for _ in range(200):
        if "ready" in lines():
            break
        await asyncio.sleep(0.05)
    assert "ready" in lines()

    stop = StopTask(key=KEY, grace_seconds=30, reason="job succeeded")
    first = asyncio.create_task(supervisor.stop(stop))
    for _ in range(stops - 1):
        await asyncio.sleep(0.3)
        await supervisor.stop(stop)  # resent: the server still sees it running
    await asyncio.wait_for(first, timeout=30)

    exited = [m.exit for m in sent if isinstance(m, TaskExited)]
    assert [(e.exit_code, e.signal) for e in exited] == [(0, None)]
    assert lines()[-2:] == ["sigterm 1", "finished its last work"]
