"""`strata submit --follow` and `strata jobs logs -f` end by saying how the job ended, and exit
with its outcome: a real server (uvicorn, in a thread) and a scripted agent on a real websocket,
the CLI in-process. No TensorFlow: the agent answers each start with what the job's env says."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from typer.testing import CliRunner, Result
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from agents.protocol import (
    Heartbeat,
    StartTask,
    TaskExit,
    TaskExited,
    TaskLogs,
    TaskStarted,
    server_message,
)
from backend.app import create_app
from backend.cli import app
from backend.cli import follow as follow_stream
from tests.backend.api.test_agent_channel import hello
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.factories import make_spec
from tests.support.postgres import free_port

BUNDLE_ERROR = "code bundle member 'evil' is a link to the absolute path '/etc/shadow'"


def act(ws: ClientConnection, start: StartTask) -> None:
    """Run the task as its env says: print FAKE_LINES, then exit FAKE_EXIT or fail to start."""
    key = start.key
    if "FAKE_ERROR" in start.env:
        exit = TaskExit(key=key, exit_code=None, error=start.env["FAKE_ERROR"])
    else:
        ws.send(TaskStarted(key=key, pid=4242).model_dump_json())
        lines = json.loads(start.env.get("FAKE_LINES", "[]"))
        ws.send(TaskLogs(key=key, first_line=0, lines=lines).model_dump_json())
        exit = TaskExit(key=key, exit_code=int(start.env["FAKE_EXIT"]), log_tail=lines[-30:])
    ws.send(TaskExited(exit=exit).model_dump_json())
    ws.send(Heartbeat(running=[]).model_dump_json())


class ScriptedAgent:
    """An agent on its own thread that acts out each start (see `act`) until closed."""

    def __init__(self, port: int) -> None:
        self.ws = connect(
            f"ws://127.0.0.1:{port}/agents/connect",
            additional_headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
        )
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        with self.ws:
            self.ws.send(hello("follow-host"))
            try:
                for frame in self.ws:
                    message = server_message.validate_json(frame)
                    if isinstance(message, StartTask):
                        act(self.ws, message)
            except ConnectionClosed:
                pass  # the test is over

    def close(self) -> None:
        self.ws.close()
        self.thread.join()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("follow")
    settings = make_settings(f"sqlite:///{data / 'strata.db'}", data / "data")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{port}"
    while not server.started:  # uvicorn offers a flag, not an event to wait on
        assert serving.is_alive(), "the server did not start"
        time.sleep(0.05)
    agent = ScriptedAgent(port)
    try:
        yield url
    finally:
        agent.close()
        server.should_exit = True
        serving.join()


@pytest.fixture(autouse=True)
def short_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scripted agent sends no lines after an exit: nothing to wait for once the job ends.
    monkeypatch.setattr(follow_stream, "DRAIN_SECONDS", 0.1)


def strata(*args: str, url: str) -> Result:
    env = {"STRATA_SERVER": url, "STRATA_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
    return CliRunner().invoke(app, list(args), env=env)


def spec_file(tmp_path: Path, name: str, **env: str) -> Path:
    spec: dict[str, Any] = make_spec(
        "mirrored",
        name=name,
        entrypoint=["python", "train.py"],
        env=env,
        restart={"policy": "never"},
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def last_lines(result: Result, count: int) -> list[str]:
    return [line.strip() for line in result.stdout.rstrip().splitlines()[-count:]]


LINES = json.dumps(["loading data", "Traceback (most recent call last):", "ValueError: bad"])


def test_submit_follow_of_a_failed_job_ends_with_the_reason_and_the_task_tail(
    server_url: str, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, "exits-3", FAKE_EXIT="3", FAKE_LINES=LINES)
    result = strata("submit", str(spec), "--follow", url=server_url)
    job_id = result.stdout.split()[1]
    assert last_lines(result, 5) == [
        "last lines of chief:0:",
        "chief:0 loading data",
        "chief:0 Traceback (most recent call last):",
        "chief:0 ValueError: bad",
        f"job {job_id} failed: chief:0 exited with code 3",
    ], result.stdout
    assert result.exit_code == 1


def test_submit_follow_of_a_task_that_could_not_start_ends_with_why(
    server_url: str, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, "no-start", FAKE_ERROR=BUNDLE_ERROR)
    result = strata("submit", str(spec), "--follow", url=server_url)
    job_id = result.stdout.split()[1]
    assert last_lines(result, 1) == [
        f"job {job_id} failed: chief:0 could not start: {BUNDLE_ERROR}"
    ]
    assert result.exit_code == 1


def test_submit_follow_of_a_succeeded_job_exits_0(server_url: str, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "fine", FAKE_EXIT="0", FAKE_LINES=json.dumps(["done"]))
    result = strata("submit", str(spec), "--follow", url=server_url)
    job_id = result.stdout.split()[1]
    assert "last lines of" not in result.stdout  # the tail is for failures
    assert last_lines(result, 1) == [f"job {job_id} succeeded: chief:0 exited with code 0"]
    assert result.exit_code == 0, result.stdout


def test_jobs_logs_follow_ends_with_the_outcome(server_url: str, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "logs-3", FAKE_EXIT="3", FAKE_LINES=LINES)
    failed_id = strata("submit", str(spec), url=server_url).stdout.split()[1]
    logs = strata("jobs", "logs", failed_id, "-f", url=server_url)
    assert last_lines(logs, 5) == [
        "last lines of chief:0:",
        "chief:0 loading data",
        "chief:0 Traceback (most recent call last):",
        "chief:0 ValueError: bad",
        f"job {failed_id} failed: chief:0 exited with code 3",
    ], logs.stdout
    assert logs.exit_code == 1

    one_task = strata("jobs", "logs", failed_id, "-f", "-t", "chief:0", url=server_url)
    assert last_lines(one_task, 1) == [f"job {failed_id} failed: chief:0 exited with code 3"]
    assert one_task.exit_code == 1

    fine = strata("submit", str(spec_file(tmp_path, "logs-0", FAKE_EXIT="0")), url=server_url)
    fine_id = fine.stdout.split()[1]
    logs = strata("jobs", "logs", fine_id, "--follow", url=server_url)
    assert last_lines(logs, 1) == [f"job {fine_id} succeeded: chief:0 exited with code 0"]
    assert logs.exit_code == 0, logs.stdout

    # Without -f it prints the lines there are and nothing more.
    plain = strata("jobs", "logs", failed_id, url=server_url)
    assert plain.exit_code == 0
    assert last_lines(plain, 1) == ["chief:0 ValueError: bad"]
