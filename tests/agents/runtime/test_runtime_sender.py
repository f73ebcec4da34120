"""The runtime's metric sender against an in-test websocket server speaking the protocol."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from websockets.sync.server import Server, ServerConnection, serve

from agents import runtime
from agents.protocol import (
    Ack,
    CheckpointAck,
    CheckpointSaved,
    Command,
    CommandFailed,
    MetricBatch,
    MetricPoint,
    Progress,
    TaskHello,
    TaskWelcome,
    runtime_message,
)
from agents.runtime import process_sink
from agents.runtime.progress import TrainingProgress
from agents.runtime.sender import MetricSender, from_env, task_channel_url
from agents.runtime.sink import NullSender

REPO = Path(__file__).resolve().parents[3]
TOKEN = "task-token-for-tests"


class FakeTaskChannel:
    """/tasks/connect as the server implements it: welcome, store, ack the highest stored."""

    def __init__(self, *, stored_through: int = -1, port: int = 0) -> None:
        self.port = port
        self.stored_through = stored_through
        self.lock = threading.Lock()
        self.stored: dict[int, MetricPoint] = {}
        self.received: list[int] = []  # every seq received, resends included
        self.batches: list[list[int]] = []
        self.hellos: list[TaskHello] = []
        self.auth: list[str | None] = []
        self.connections = 0
        self.gate = threading.Event()  # the welcome waits for it
        self.gate.set()
        # Batch numbers (0-based, over all connections) after which the server hangs up
        # without acknowledging; the points of such a batch are stored or not.
        self.drop_after: set[int] = set()
        self.store_dropped = True
        self.commands: list[Command] = []  # sent right after the welcome
        self.records: list[CheckpointSaved | CommandFailed] = []  # resends included
        self.progress: list[tuple[int, Progress]] = []  # (connection, report)
        self.unacked_checkpoints = 0  # hang up instead of acking this many reports
        self._server: Server | None = None

    def __enter__(self) -> FakeTaskChannel:
        self._server = serve(self.handle, "127.0.0.1", self.port, compression=None)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.auth.append(ws.request.headers.get("Authorization"))
        if ws.request.headers.get("Authorization") != f"Bearer {TOKEN}":
            ws.close(1008, "a task token is required")
            return
        hello = runtime_message.validate_json(ws.recv(timeout=5))
        assert isinstance(hello, TaskHello)
        self.gate.wait(10)
        with self.lock:
            self.hellos.append(hello)
            self.connections += 1
            next_seq = self.stored_through + 1
        ws.send(TaskWelcome(next_seq=next_seq).model_dump_json())
        for command in self.commands:
            ws.send(command.model_dump_json())
        for raw in ws:
            message = runtime_message.validate_json(raw)
            if isinstance(message, CheckpointSaved | CommandFailed):
                with self.lock:
                    self.records.append(message)
                    hang_up = isinstance(message, CheckpointSaved) and self.unacked_checkpoints
                    self.unacked_checkpoints -= bool(hang_up)
                if hang_up:
                    return
                if isinstance(message, CheckpointSaved):
                    ws.send(CheckpointAck(name=message.name).model_dump_json())
                continue
            if isinstance(message, Progress):
                with self.lock:
                    self.progress.append((self.connections, message))
                continue
            assert isinstance(message, MetricBatch)
            seqs = [point.seq for point in message.points]
            assert seqs == sorted(seqs)
            with self.lock:
                number = len(self.batches)
                self.batches.append(seqs)
                self.received.extend(seqs)
                dropping = number in self.drop_after
                if not dropping or self.store_dropped:
                    for point in message.points:
                        if point.seq > self.stored_through:
                            self.stored[point.seq] = point
                            self.stored_through = point.seq
                stored = self.stored_through
            if dropping:
                return  # hang up before the ack
            ws.send(Ack(seq=stored).model_dump_json())

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if condition():
                    return
            time.sleep(0.01)
        raise AssertionError("the fake server never saw what the test waited for")


@pytest.fixture
def channel() -> Iterator[FakeTaskChannel]:
    with FakeTaskChannel() as server:
        yield server


@pytest.fixture
def make_sender() -> Iterator[Callable[..., MetricSender]]:
    senders: list[MetricSender] = []

    def make(url: str, **options: object) -> MetricSender:
        options.setdefault("exit_flush_timeout", None)
        options.setdefault("backoff_min", 0.05)
        options.setdefault("backoff_max", 0.2)
        sender = MetricSender(
            task_channel_url(url),
            TOKEN,
            "chief:0",
            2,
            **options,  # type: ignore[arg-type]
        )
        senders.append(sender)
        return sender

    yield make
    for sender in senders:
        sender.close(timeout=0)


def test_progress_is_sent_when_it_changes_and_again_after_a_reconnect(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    progress, step = TrainingProgress(), [0]
    progress.begin(lambda: step[0], steps=10, epochs=3)
    progress.epoch_begin(0)
    sender = make_sender(channel.url, progress=progress, progress_interval=0.05)
    channel.wait_for(lambda: [r.step for _, r in channel.progress] == [0])
    assert channel.progress[0][1] == Progress(
        step=0, total_steps=30, epoch=0, epochs=3, busy="tracing"
    )
    step[0] = 7
    channel.wait_for(lambda: len(channel.progress) == 2)
    time.sleep(0.3)  # unchanged: nothing more is sent
    assert [(r.step, r.busy) for _, r in channel.progress] == [(0, "tracing"), (7, None)]

    channel.drop_after.add(len(channel.batches))  # the next batch's connection is dropped
    sender.put("loss", 1.0, 7)
    channel.wait_for(lambda: channel.connections == 2 and len(channel.progress) == 3)
    assert channel.progress[-1] == (2, channel.progress[1][1])  # the latest, resent


def closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_task_channel_url() -> None:
    assert task_channel_url("http://h:8000") == "ws://h:8000/tasks/connect"
    assert task_channel_url("https://h/") == "wss://h/tasks/connect"
    assert task_channel_url("https://h/strata") == "wss://h/strata/tasks/connect"
    assert task_channel_url("h:8000") == "ws://h:8000/tasks/connect"
    with pytest.raises(ValueError):
        task_channel_url("ftp://h")


def test_points_are_numbered_batched_and_acknowledged(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    sender = make_sender(channel.url)
    for step in range(10):
        sender.put("loss", 1.0 / (step + 1), step, wall_time=1000.0 + step)
    assert sender.flush(5)
    assert sender.pending == 0 and sender.acked_seq == 9
    assert channel.hellos == [TaskHello(task="chief:0", attempt=2)]
    assert channel.auth == [f"Bearer {TOKEN}"]
    assert sorted(channel.stored) == list(range(10))
    assert channel.received == list(range(10))  # nothing sent twice
    assert len(channel.batches) <= 2  # put in one go: one batch (two if a tick fell between)
    point = channel.stored[3]
    assert (point.name, point.step, point.value, point.wall_time) == ("loss", 3, 0.25, 1003.0)

    # Points put over time go in separate batches, about one per 100 ms.
    before = len(channel.batches)
    sender.put("loss", 0.1, 10)
    time.sleep(0.35)
    sender.put("loss", 0.1, 11)
    assert sender.flush(5)
    assert len(channel.batches) == before + 2
    assert channel.received == list(range(12))


def test_a_trickle_of_points_goes_in_fewer_batches(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    # A training loop's few points a second: each batch costs the server a commit, so after
    # a small one the next waits ~500 ms instead of ~100 ms (about 12 batches here).
    sender = make_sender(channel.url)
    assert sender.flush(5)
    for step in range(24):
        sender.put("batch/loss", 0.5, step)
        time.sleep(0.05)
    assert sender.flush(5)
    assert channel.received == list(range(24))
    assert len(channel.batches) <= 5


def test_batches_hold_at_most_5000_points(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    channel.gate.clear()  # points pile up before the welcome
    sender = make_sender(channel.url)
    for seq in range(12_000):
        sender.put("batch/loss", 0.5, seq)
    channel.gate.set()
    assert sender.flush(10)
    assert [len(batch) for batch in channel.batches] == [5000, 5000, 2000]
    assert channel.received == list(range(12_000))


def test_resends_what_was_not_acknowledged_after_a_drop(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    channel.drop_after = {1, 3}
    channel.store_dropped = False  # batch 1 is lost; batch 3 stored but never acknowledged
    sender = make_sender(channel.url)
    step = 0
    for _ in range(6):
        sent = len(channel.batches)
        for _ in range(50):
            sender.put("loss", 0.5, step)
            step += 1
        # Each group goes in a batch of its own (or with a resend), so that batch 3 exists
        # however slow the machine: a sleep here once let the groups merge into fewer.
        channel.wait_for(lambda: len(channel.batches) > sent)  # noqa: B023 - called at once
    assert sender.flush(10)
    assert sorted(channel.stored) == list(range(step))  # no gaps
    assert channel.connections == 3
    # Duplicates are only ever points that had not been acknowledged.
    acknowledged_before_drop: set[int] = set()
    for number, batch in enumerate(channel.batches):
        assert not acknowledged_before_drop.intersection(batch)
        if number not in channel.drop_after:
            acknowledged_before_drop.update(batch)
    resent = [seq for seq in set(channel.received) if channel.received.count(seq) > 1]
    dropped_batches = {seq for n in channel.drop_after for seq in channel.batches[n]}
    assert set(resent) <= dropped_batches
    assert sender.connections == 3


def test_welcome_next_seq_skips_stored_points(make_sender: Callable[..., MetricSender]) -> None:
    with FakeTaskChannel(stored_through=4) as channel:
        channel.gate.clear()
        sender = make_sender(channel.url)
        for step in range(10):
            sender.put("loss", 0.5, step)
        channel.gate.set()
        assert sender.flush(5)
        assert channel.received == [5, 6, 7, 8, 9]


def test_overflow_drops_the_oldest_and_counts(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    channel.gate.clear()
    sender = make_sender(channel.url, capacity=10)
    for step in range(25):
        sender.put("loss", float(step), step)
    assert sender.dropped == 15
    assert sender.pending == 10
    channel.gate.set()
    assert sender.flush(5)
    assert channel.received == list(range(15, 25))
    assert [channel.stored[seq].value for seq in range(15, 25)] == [float(s) for s in range(15, 25)]


def test_put_never_raises_and_flush_times_out_when_the_server_is_down(
    make_sender: Callable[..., MetricSender],
) -> None:
    sender = make_sender(closed_port_url())
    for step in range(1000):  # a lock and an append each: nothing waits for the server
        sender.put("loss", 0.5, step)
    sender.put("no spaces allowed", 1.0, 1)
    sender.put("loss", "not a number", 1)  # type: ignore[arg-type]
    sender.put("loss", 1.0, -1)
    sender.put("loss", float("nan"), 2)  # NaN is a value like any other
    assert sender.invalid == 3
    assert sender.pending == 1001
    started = time.perf_counter()
    assert sender.flush(0.3) is False
    assert time.perf_counter() - started < 10  # it gave up rather than wait for the server


def test_a_flush_does_not_sleep_out_the_backoff_once_the_server_is_back(
    make_sender: Callable[..., MetricSender],
) -> None:
    # A process exiting after the server was down for a while: its exit flush must not wait
    # out a backoff of several seconds while the server is already back.
    url = closed_port_url()
    sender = make_sender(url, backoff_min=0.2, backoff_max=30.0)
    sender.put("loss", 1.0, 1)
    time.sleep(3.5)  # failed tries 0.2, 0.4, 0.8, 1.6 s apart: the next wait is >= 2.4 s
    assert sender.connections == 0
    flushed: list[bool] = []
    flushing = threading.Thread(target=lambda: flushed.append(sender.flush(1.5)))
    flushing.start()
    time.sleep(0.3)  # the flush's first, immediate try finds the server still down
    with FakeTaskChannel(port=int(url.rsplit(":", 1)[1])) as channel:
        flushing.join(5)
        assert flushed == [True]
        assert sorted(channel.stored) == [0]


def test_commands_reach_the_hooks(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    channel.commands = [Command(id=7, action="checkpoint")]
    seen: list[Command] = []
    got = threading.Event()
    sender = make_sender(channel.url)

    def record(command: Command) -> None:
        seen.append(command)
        got.set()

    def fail(command: Command) -> None:
        raise ZeroDivisionError  # a failing hook is logged, not fatal

    sender.on_command(record)
    sender.on_command(fail)
    assert got.wait(5)
    assert seen == [Command(id=7, action="checkpoint")]
    sender.put("loss", 1.0, 1)
    assert sender.flush(5)


def test_checkpoint_reports_are_resent_until_acknowledged_in_order(
    channel: FakeTaskChannel, make_sender: Callable[..., MetricSender]
) -> None:
    channel.unacked_checkpoints = 1  # the first report's connection drops before its ack
    sender = make_sender(channel.url)
    first = CheckpointSaved(
        name="ckpt-1", step=10, size_bytes=1, wall_time=1.0, trigger="command", command_id=3
    )
    second = CheckpointSaved(name="ckpt-2", step=20, size_bytes=1, wall_time=2.0, trigger="epoch")
    sender.report_checkpoint(first)
    sender.report_checkpoint(second)
    sender.report_command_failed(4, "no training in progress")
    sender.put("loss", 1.0, 1)
    assert sender.flush(5)
    with channel.lock:
        records = list(channel.records)
    assert records == [first, first, second, CommandFailed(id=4, reason="no training in progress")]
    assert channel.connections == 2


def test_a_refused_token_is_not_an_error(channel: FakeTaskChannel) -> None:
    sender = MetricSender(
        task_channel_url(channel.url), "wrong", "chief:0", 0, exit_flush_timeout=None
    )
    try:
        sender.put("loss", 1.0, 1)
        channel.wait_for(lambda: len(channel.auth) >= 1)
        assert sender.flush(0.2) is False
        assert sender.connections == 0
    finally:
        sender.close(timeout=0)


def test_no_sender_without_the_task_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "STRATA_SERVER": "http://127.0.0.1:1",
        "STRATA_TASK_TOKEN": "t",
        "STRATA_TASK": "chief:0",
        "STRATA_ATTEMPT": "0",
    }
    threads_before = {t.name for t in threading.enumerate()}
    for missing in env:
        partial = {k: v for k, v in env.items() if k != missing}
        assert isinstance(from_env(partial), NullSender)
    assert isinstance(from_env({**env, "STRATA_ATTEMPT": "x"}), NullSender)
    assert isinstance(from_env({**env, "STRATA_TASK": "boss"}), NullSender)
    assert "strata-metrics" not in {t.name for t in threading.enumerate()} - threads_before

    for name in env:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(process_sink, "_instance", None)
    runtime.report("loss", 1.0, 1)  # reports nothing, raises nothing
    assert isinstance(process_sink.get_sender(), NullSender)
    assert runtime.callbacks() == []
    assert runtime.flush(0.1) is True


def test_process_exit_flushes_the_last_points(channel: FakeTaskChannel) -> None:
    # A chief that exits right after model.fit still delivers its last epoch's points.
    script = (
        "from agents import runtime\n"
        "for step in range(100):\n"
        "    runtime.report('loss', 1.0 / (step + 1), step)\n"
        "runtime.report('epoch', 1, 99)\n"
    )
    env = {
        **os.environ,
        "STRATA_SERVER": channel.url,
        "STRATA_TASK_TOKEN": TOKEN,
        "STRATA_TASK": "chief:0",
        "STRATA_ATTEMPT": "0",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, timeout=30, capture_output=True
    )
    assert result.returncode == 0, result.stderr.decode()
    assert sorted(channel.stored) == list(range(101))
    assert channel.stored[100].name == "epoch"
