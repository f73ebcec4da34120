"""An exit while the channel is down reaches the server: in the next hello, or, when the
attempt exited after that hello was made, once the new channel can send."""

from __future__ import annotations

from pathlib import Path

from agents.host.supervisor import Supervisor
from agents.protocol import AgentMessage, TaskExit, TaskExited, TaskKey, Welcome


def exit_of(task: str) -> TaskExit:
    return TaskExit(key=TaskKey(job_id=1, task=task, attempt=0), exit_code=0)


def test_an_exit_between_the_hello_and_the_welcome_is_sent_once_the_channel_is_up() -> None:
    sent: list[AgentMessage] = []
    up = False

    def send(message: AgentMessage) -> bool:
        if up:
            sent.append(message)
        return up

    supervisor = Supervisor(Path.cwd(), "http://server.test", send)
    supervisor._finish(exit_of("worker:0"))  # while the server is away
    hello = supervisor.hello_finished(most=50)
    assert [e.key.task for e in hello] == ["worker:0"]  # the hello carries it
    supervisor._finish(exit_of("chief:0"))  # after the hello was made, before the welcome
    up = True
    supervisor.reconnected(Welcome(heartbeat_seconds=1))
    assert sent == [TaskExited(exit=exit_of("chief:0"))]  # not the one the hello carried
    supervisor.reconnected(Welcome(heartbeat_seconds=1))  # a later channel: sent already
    assert sent == [TaskExited(exit=exit_of("chief:0"))]
