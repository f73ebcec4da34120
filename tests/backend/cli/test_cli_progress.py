"""A running job's progress in `strata jobs ls`, `strata jobs show` and `--follow`: a real server
(uvicorn, in a thread), a scripted agent on a real websocket that keeps its task running, and
that task's runtime on the runtime channel reporting `Progress` as a training process does. No
TensorFlow; the CLI in-process."""

from __future__ import annotations

import io
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from rich.console import Console
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from agents.protocol import (
    Heartbeat,
    Progress,
    RunningTask,
    StartTask,
    TaskExit,
    TaskExited,
    TaskHello,
    TaskKey,
    TaskLogs,
    TaskStarted,
    server_message,
)
from backend.app import create_app
from backend.cli import follow as follow_stream
from backend.rest_client import StrataClient
from tests.backend.api.test_agent_channel import hello
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.cli import run_strata
from tests.support.factories import make_spec
from tests.support.postgres import free_port

TOTAL, EPOCHS = 4000, 5
LOG_LINE = "loading the digits"


@dataclass
class Started:
    key: TaskKey
    token: str


class TrainingAgent:
    """An agent on its own thread: it starts each task as one that trains (started, a log line,
    then listed as running in every heartbeat) until the test ends it with `finish`."""

    def __init__(self, port: int) -> None:
        self.ws = connect(
            f"ws://127.0.0.1:{port}/agents/connect",
            additional_headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
        )
        self.started: queue.Queue[Started] = queue.Queue()
        self.finishing: queue.Queue[TaskKey] = queue.Queue()
        self.running: dict[TaskKey, int] = {}
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        with self.ws:
            self.ws.send(hello("progress-host"))
            try:
                while not self.closed.is_set():
                    try:
                        message = server_message.validate_json(self.ws.recv(timeout=0.3))
                    except TimeoutError:
                        message = None
                    if isinstance(message, StartTask):
                        self.start(message)
                    while not self.finishing.empty():
                        self.exit(self.finishing.get())
                    running = [RunningTask(key=k, pid=p) for k, p in self.running.items()]
                    self.ws.send(Heartbeat(running=running).model_dump_json())
            except ConnectionClosed:
                pass  # the test is over

    def start(self, start: StartTask) -> None:
        self.running[start.key] = 4242
        self.ws.send(TaskStarted(key=start.key, pid=4242).model_dump_json())
        self.ws.send(TaskLogs(key=start.key, first_line=0, lines=[LOG_LINE]).model_dump_json())
        self.started.put(Started(start.key, start.env["STRATA_TASK_TOKEN"]))

    def exit(self, key: TaskKey) -> None:
        if self.running.pop(key, None) is None:
            return  # ended already
        exit = TaskExit(key=key, exit_code=0, log_tail=[LOG_LINE])
        self.ws.send(TaskExited(exit=exit).model_dump_json())

    def finish(self, key: TaskKey) -> None:
        self.finishing.put(key)

    def close(self) -> None:
        self.closed.set()
        self.thread.join()


@dataclass
class Cluster:
    url: str
    port: int
    agent: TrainingAgent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("progress")
    settings = make_settings(f"sqlite:///{data / 'strata.db'}", data / "data")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    while not server.started:  # uvicorn offers a flag, not an event to wait on
        assert serving.is_alive(), "the server did not start"
        time.sleep(0.05)
    agent = TrainingAgent(port)
    try:
        yield Cluster(f"http://127.0.0.1:{port}", port, agent)
    finally:
        agent.close()
        server.should_exit = True
        serving.join()


@pytest.fixture(autouse=True)
def short_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scripted agent sends no lines after an exit: nothing to wait for once the job ends.
    monkeypatch.setattr(follow_stream, "DRAIN_SECONDS", 0.1)


def strata(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    # run_strata sizes the CLI's consoles from COLUMNS (another file's run may have left them
    # at another width).
    env = {**os.environ, "STRATA_SERVER": url, "STRATA_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
    return run_strata(args, env)


def wait_for(
    url: str, job_id: int, predicate: Callable[[Any], bool], what: str, timeout: float = 30
) -> Any:
    with StrataClient(url, ADMIN_TOKEN) as client:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = client.job(job_id)
            if predicate(job):
                return job
            time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not become {what}: {job}")


@dataclass
class Training:
    job_id: int
    key: TaskKey
    runtime: ClientConnection

    def report(self, step: int, **fields: Any) -> None:
        # The runtime's epoch is 0-based: the second epoch is under way.
        report = Progress(step=step, total_steps=TOTAL, epoch=1, epochs=EPOCHS, **fields)
        self.runtime.send(report.model_dump_json())


@pytest.fixture
def training(cluster: Cluster, tmp_path: Path) -> Iterator[Training]:
    """A running job whose runtime reported two steps a second apart: it has a rate and an ETA."""
    spec: dict[str, Any] = make_spec("mirrored", name="trains", restart={"policy": "never"})
    path = tmp_path / "trains.yaml"
    path.write_text(yaml.safe_dump(spec))
    submitted = strata("submit", str(path), url=cluster.url)
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.split()[1])
    started = cluster.agent.started.get(timeout=30)
    assert started.key.job_id == job_id
    wait_for(cluster.url, job_id, lambda job: job.status == "running", "running")
    with connect(
        f"ws://127.0.0.1:{cluster.port}/tasks/connect",
        additional_headers={"Authorization": f"Bearer {started.token}"},
    ) as runtime:
        runtime.send(
            TaskHello(task=started.key.task, attempt=started.key.attempt).model_dump_json()
        )
        runtime.recv(timeout=10)  # the welcome
        run = Training(job_id, started.key, runtime)
        run.report(1000)
        time.sleep(1.0)  # a rate needs steps seen at two moments
        run.report(1520)
        wait_for(
            cluster.url,
            job_id,
            lambda job: (
                job.progress is not None
                and job.progress.step == 1520
                and job.progress.eta_seconds is not None
            ),
            "reported with an ETA",
        )
        try:
            yield run
        finally:
            cluster.agent.finish(started.key)
            wait_for(cluster.url, job_id, lambda job: job.status == "succeeded", "succeeded")


def progress_cell(listed: str, job_id: int) -> str:
    """The PROGRESS cell of the job's row in `strata jobs ls` (one line at 200 columns)."""
    lines = listed.splitlines()
    header = next(line for line in lines if "PROGRESS" in line)
    column = [cell.strip() for cell in header.split("┃")].index("PROGRESS")
    rows = [line.split("│") for line in lines if "│" in line]
    row = next((cells for cells in rows if cells[1].strip() == str(job_id)), None)
    assert row is not None, listed
    return row[column].strip()


def test_ls_and_show_say_how_far_a_running_job_is(cluster: Cluster, training: Training) -> None:
    listed = strata("jobs", "ls", url=cluster.url)
    assert listed.returncode == 0, listed.stderr
    assert "PROGRESS" in listed.stdout
    cell = progress_cell(listed.stdout, training.job_id)
    assert re.fullmatch(r"1520/4000 38% \S+/s ETA \d+[smhd]\S*", cell), cell

    shown = strata("jobs", "show", str(training.job_id), url=cluster.url)
    assert shown.returncode == 0, shown.stderr
    assert re.search(
        r"^progress: step 1520 of 4000 \(38%\), epoch 2 of 5, \S+ steps/s, ETA \d+[smhd]\S*$",
        shown.stdout,
        re.MULTILINE,
    ), shown.stdout

    # A phase that holds the step still is named.
    training.report(1520, busy="checkpointing")
    wait_for(
        cluster.url,
        training.job_id,
        lambda job: job.progress is not None and job.progress.busy == "checkpointing",
        "checkpointing",
    )
    shown = strata("jobs", "show", str(training.job_id), url=cluster.url)
    assert re.search(r"^progress: step 1520 of 4000 .*, checkpointing$", shown.stdout, re.M)


def test_an_ended_job_shows_no_progress(cluster: Cluster, training: Training) -> None:
    cluster.agent.finish(training.key)
    wait_for(cluster.url, training.job_id, lambda job: job.status == "succeeded", "succeeded")
    assert progress_cell(strata("jobs", "ls", url=cluster.url).stdout, training.job_id) == "-"
    shown = strata("jobs", "show", str(training.job_id), url=cluster.url).stdout
    assert "progress:" not in shown


def follow_beside(
    cluster: Cluster, training: Training, stdout: Console, stderr: Console, seen: str
) -> None:
    """Follow the job until `seen` is written to either console, then end its task; returns
    once the follow has seen the job end."""
    buffers = [c.file for c in (stdout, stderr) if isinstance(c.file, io.StringIO)]

    def end_once_seen() -> None:
        deadline = time.monotonic() + 60  # past it the job ends anyway: the test then fails
        while time.monotonic() < deadline and not any(seen in b.getvalue() for b in buffers):
            time.sleep(0.05)
        cluster.agent.finish(training.key)

    watcher = threading.Thread(target=end_once_seen, daemon=True)
    watcher.start()
    status = follow_stream.follow(
        server=cluster.url,
        token=ADMIN_TOKEN,
        job_id=training.job_id,
        console=stdout,
        side_console=stderr,
    )
    watcher.join()
    assert status == "succeeded"


def console(*, terminal: bool) -> Console:
    return Console(file=io.StringIO(), force_terminal=terminal, width=160, color_system=None)


def text_of(console: Console) -> str:
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_follow_draws_a_bar_under_the_log_on_a_terminal(
    cluster: Cluster, training: Training
) -> None:
    stdout, stderr = console(terminal=True), console(terminal=True)
    follow_beside(cluster, training, stdout, stderr, seen="ETA")
    drawn = text_of(stdout)
    assert LOG_LINE in drawn
    assert re.search(r"job \d+ running █+░+ 1520/4000 38% · epoch 2/5 · \S+/s · ETA", drawn)
    assert text_of(stderr) == ""


def test_follow_draws_the_bar_on_stderr_when_stdout_is_piped(
    cluster: Cluster, training: Training
) -> None:
    stdout, stderr = console(terminal=False), console(terminal=True)
    follow_beside(cluster, training, stdout, stderr, seen="ETA")
    assert LOG_LINE in text_of(stdout)
    assert "1520/4000" not in text_of(stdout) and "█" not in text_of(stdout)
    assert re.search(r"█+░+ 1520/4000 38%", text_of(stderr))
    assert LOG_LINE not in text_of(stderr)


def test_follow_prints_plain_progress_lines_on_stderr_without_a_terminal(
    cluster: Cluster, training: Training
) -> None:
    stdout, stderr = console(terminal=False), console(terminal=False)
    follow_beside(cluster, training, stdout, stderr, seen="ETA")
    assert text_of(stdout).strip().endswith(LOG_LINE)
    (line,) = text_of(stderr).splitlines()  # the next is due in PLAIN_SECONDS
    assert re.fullmatch(
        rf"job {training.job_id} running: 1520/4000 38% · epoch 2/5 · \S+/s · ETA \S+", line
    ), line
    assert "█" not in line


def test_logs_follow_keeps_progress_off_stdout(cluster: Cluster, training: Training) -> None:
    # Through the command: CliRunner's streams are no terminals, so plain lines go to stderr.
    threading.Timer(5.0, cluster.agent.finish, [training.key]).start()
    followed = strata("jobs", "logs", str(training.job_id), "-f", url=cluster.url)
    assert followed.returncode == 0, followed.stderr
    assert LOG_LINE in followed.stdout and "1520/4000" not in followed.stdout
    assert f"job {training.job_id} running: 1520/4000 38%" in followed.stderr
