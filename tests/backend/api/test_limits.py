"""Each websocket limit at its boundary: at the limit passes, one over is refused."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from agents.host.lines import LineSplitter
from agents.host.supervisor import LogBuffer
from agents.protocol import (
    MAX_LOG_BATCH_CHARS,
    MAX_LOG_LINE,
    Ack,
    LogsAck,
    MetricBatch,
    MetricPoint,
    StartTask,
    TaskKey,
    TaskLogs,
    TaskStarted,
    Welcome,
    cut_line,
    server_message,
)
from backend.api import ratelimit
from backend.api.ratelimit import TokenBucket
from backend.app import create_app
from backend.config import Settings
from tests.backend.api.test_fuzz_websockets import hello_frame
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.factories import make_spec
from tests.support.runtime_channel import reply, runtime

AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
KEY = TaskKey(job_id=1, task="chief:0", attempt=0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Every token bucket made from now on reads this clock, which moves only by hand."""
    fake = FakeClock()
    monkeypatch.setattr(ratelimit, "now", fake)
    return fake


def app_client(database_url: str, tmp_path: Path, **limits: Any) -> TestClient:
    return TestClient(create_app(make_settings(database_url, tmp_path / "data", **limits)))


def closed(ws: WebSocketTestSession) -> WebSocketDisconnect:
    with pytest.raises(WebSocketDisconnect) as info:
        while True:
            ws.receive_text()
    return info.value


def submit(client: TestClient) -> int:
    spec = make_spec("mirrored", replicas={"chief": {"count": 1, "gpus": 0}})
    response = client.post("/jobs", json=spec, headers=ADMIN)
    assert response.status_code == 201, response.text
    job_id: int = response.json()["id"]
    return job_id


def logs_frame(lines: list[str], first_line: int = 0, key: TaskKey = KEY) -> str:
    return TaskLogs(key=key, first_line=first_line, lines=lines).model_dump_json()


def ack(ws: WebSocketTestSession) -> LogsAck:
    while True:
        message = server_message.validate_json(ws.receive_text())
        if isinstance(message, LogsAck):
            return message


# --- the token bucket -----------------------------------------------------------------------


def test_bucket_allows_the_burst_then_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.49
    assert not bucket.take()
    clock.now += 0.01  # half a second at 2/s: one token
    assert bucket.take()
    assert not bucket.take()
    clock.now += 3600  # a long silence refills only up to the burst
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    assert bucket.describe() == "over 2 frames/s (burst 3)"


def test_bucket_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        TokenBucket(rate=0, burst=1)


# --- frames per second --------------------------------------------------------------------


def test_an_agent_over_its_rate_is_closed_and_others_go_on(
    database_url: str, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        app_client(
            database_url, tmp_path, agent_frames_per_second=1.0, agent_frame_burst=4
        ) as client,
        client.websocket_connect("/agents/connect", headers=AGENT) as quiet,
        client.websocket_connect("/agents/connect", headers=AGENT) as noisy,
    ):
        quiet.send_text(hello_frame("quiet"))
        assert isinstance(server_message.validate_json(quiet.receive_text()), Welcome)
        noisy.send_text(hello_frame("noisy"))  # frame 1 of the burst of 4
        for line in range(3):  # frames 2..4: at the limit, each answered
            noisy.send_text(logs_frame(["x"], line))
            assert ack(noisy).next_line == line + 1
        noisy.send_text(logs_frame(["x"], 3))  # one over
        refused = closed(noisy)
        assert (refused.code, refused.reason) == (1008, "over 1 frames/s (burst 4)")
        assert "agent noisy" in caplog.text and "over 1 frames/s" in caplog.text
        # The other agent's bucket is its own; and a second later the rate allows one more.
        for line in range(3):
            quiet.send_text(logs_frame(["y"], line, TaskKey(job_id=2, task="ps:0", attempt=0)))
            assert ack(quiet).next_line == line + 1
        clock.now += 1.0
        quiet.send_text(logs_frame(["y"], 3, TaskKey(job_id=2, task="ps:0", attempt=0)))
        assert ack(quiet).next_line == 4


def test_a_stream_client_over_its_rate_is_closed(
    database_url: str, tmp_path: Path, clock: FakeClock
) -> None:
    with (
        app_client(
            database_url, tmp_path, stream_frames_per_second=1.0, stream_frame_burst=3
        ) as client,
        client.websocket_connect(f"/stream?token={ADMIN_TOKEN}") as ws,
    ):
        ws.send_text(json.dumps({"type": "subscribe", "cursor": None}))
        ws.send_text("{}")
        ws.send_text("{}")  # three frames: the burst
        ws.send_text("{}")
        refused = closed(ws)
        assert (refused.code, refused.reason) == (1008, "over 1 frames/s (burst 3)")


# --- frame sizes ----------------------------------------------------------------------------


def padded_logs(size: int) -> str:
    frame = logs_frame([""])
    return logs_frame(["x" * (size - len(frame))])


def test_agent_frames_at_the_size_limit_pass_and_one_over_closes(
    database_url: str, tmp_path: Path
) -> None:
    with (
        app_client(database_url, tmp_path, agent_frame_bytes=5_000) as client,
        client.websocket_connect("/agents/connect", headers=AGENT) as ws,
    ):
        ws.send_text(hello_frame())
        at_limit = padded_logs(5_000)
        assert len(at_limit) == 5_000
        ws.send_text(at_limit)
        assert ack(ws).next_line == 1
        over = padded_logs(5_001)
        ws.send_text(over.replace('"first_line":0', '"first_line":1'))
        refused = closed(ws)
        assert (refused.code, refused.reason) == (1009, "frame over 5000 bytes")


def test_subscribe_frames_at_the_size_limit_pass_and_one_over_closes(
    database_url: str, tmp_path: Path
) -> None:
    with app_client(database_url, tmp_path, stream_frame_bytes=200) as client:
        frame = json.dumps({"type": "subscribe", "cursor": None})
        at_limit = frame[:-1] + " " * (200 - len(frame)) + "}"
        with client.websocket_connect(f"/stream?token={ADMIN_TOKEN}") as ws:
            ws.send_text(at_limit)
            assert json.loads(ws.receive_text())["type"] == "history_end"
        with client.websocket_connect(f"/stream?token={ADMIN_TOKEN}") as ws:
            ws.send_text(at_limit[:-1] + " }")
            refused = closed(ws)
        assert (refused.code, refused.reason) == (1009, "subscribe frame over 200 bytes")


# --- metric batches -------------------------------------------------------------------------


def batch(count: int, first_seq: int = 0) -> str:
    return MetricBatch(
        points=[
            MetricPoint(seq=seq, name="loss", step=seq, value=1.0, wall_time=1.7e9)
            for seq in range(first_seq, first_seq + count)
        ]
    ).model_dump_json()


def test_metric_batches_at_the_limit_are_stored_and_one_over_closes(
    database_url: str, tmp_path: Path
) -> None:
    with app_client(database_url, tmp_path, max_metric_batch_points=3) as client:
        job_id = submit(client)
        with runtime(client, job_id) as ws:
            reply(ws)  # task_welcome
            ws.send_text(batch(3))
            assert reply(ws) == Ack(seq=2)
            ws.send_text(batch(4, first_seq=3))
            refused = closed(ws)
        assert (refused.code, refused.reason) == (
            1009,
            "metric batch of 4 points is over the limit of 3",
        )


def test_the_protocol_bound_on_batches_closes_with_1009(database_url: str, tmp_path: Path) -> None:
    with app_client(database_url, tmp_path) as client:
        job_id = submit(client)
        with runtime(client, job_id) as ws:
            reply(ws)
            frame = json.loads(batch(1))
            frame["points"] = frame["points"] * 5_001
            ws.send_text(json.dumps(frame))
            refused = closed(ws)
        assert refused.code == 1009
        assert refused.reason.startswith("frame over a limit: metrics.points: List should have at")


# --- open streams per token -----------------------------------------------------------------


def subscribed(client: TestClient, stack: list[Any]) -> WebSocketTestSession:
    """A cluster stream past its history (the context goes on `stack`, to be left later)."""
    context = client.websocket_connect(f"/stream?token={ADMIN_TOKEN}")
    ws = context.__enter__()
    stack.append(context)
    ws.send_text(json.dumps({"type": "subscribe", "cursor": None}))
    while json.loads(ws.receive_text())["type"] != "history_end":
        pass
    return ws


def test_streams_over_the_limit_per_token_are_refused_and_older_ones_go_on(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    contexts: list[Any] = []
    with app_client(database_url, tmp_path, max_streams_per_token=2) as client:
        try:
            older = [subscribed(client, contexts), subscribed(client, contexts)]
            with client.websocket_connect(f"/stream?token={ADMIN_TOKEN}") as third:
                refused = closed(third)
            assert (refused.code, refused.reason) == (
                1008,
                "too many open streams for this token (limit 2)",
            )
            assert "a stream of the admin token" in caplog.text
            job_id = submit(client)  # its "created" event reaches both older streams
            for ws in older:
                frame = json.loads(ws.receive_text())
                assert (frame["job_id"], frame["event"]["kind"]) == (job_id, "created")
        finally:
            for context in reversed(contexts):
                context.__exit__(None, None, None)
        # Closed streams give their slots back.
        again: list[Any] = []
        try:
            subscribed(client, again)
            subscribed(client, again)
        finally:
            for context in reversed(again):
                context.__exit__(None, None, None)


# --- log lines ------------------------------------------------------------------------------


def test_cut_line_keeps_the_limit_and_says_how_much_was_cut() -> None:
    assert cut_line("x" * 300, 300) == "x" * 300
    line = "y" * 301
    cut = cut_line(line, 300)
    assert len(cut) == 300
    kept = cut.index(" [strata")
    assert cut.endswith(f" [strata: line cut, {301 - kept} more characters]")
    assert line.startswith(cut[:kept])


def test_the_agent_cuts_long_lines_and_bounds_its_batches() -> None:
    splitter = LineSplitter()
    (line,) = splitter.feed(b"z" * (MAX_LOG_LINE * 3) + b"\n")
    kept = line.index(" [strata")
    assert len(line) == MAX_LOG_LINE
    assert line.endswith(f" [strata: line cut, {MAX_LOG_LINE * 3 - kept} more characters]")
    assert splitter.feed(b"short\n") == ["short"]
    buffer = LogBuffer()
    buffer.add(["w" * MAX_LOG_LINE] * 100)
    first, batch = buffer.unsent()
    assert first == 0
    assert sum(map(len, batch)) <= MAX_LOG_BATCH_CHARS + MAX_LOG_LINE
    assert len(batch) == MAX_LOG_BATCH_CHARS // MAX_LOG_LINE


def test_the_server_tells_its_agents_its_line_limit(database_url: str, tmp_path: Path) -> None:
    with app_client(database_url, tmp_path, max_log_line_chars=1000) as client:
        with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
            ws.send_text(hello_frame())
            welcome = server_message.validate_json(ws.receive_text())
        assert isinstance(welcome, Welcome) and welcome.max_log_line_chars == 1000
    # The agents cut their tasks' lines there: a limit an agent frame cannot carry is refused.
    with pytest.raises(ValueError, match="max_log_line_chars"):
        make_settings(database_url, tmp_path, max_log_line_chars=65_537)


def test_the_server_cuts_long_log_lines_with_a_marker(database_url: str, tmp_path: Path) -> None:
    with app_client(database_url, tmp_path, max_log_line_chars=256) as client:
        job_id = submit(client)
        key = TaskKey(job_id=job_id, task="chief:0", attempt=0)
        with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
            ws.send_text(hello_frame())
            # Logs of a task placed on this agent (an agent speaks only for its own tasks).
            while not isinstance(
                message := server_message.validate_json(ws.receive_text()), StartTask
            ):
                pass
            assert message.key == key
            ws.send_text(logs_frame(["a" * 256, "b" * 257, "one\ntwo", "last"], key=key))
            assert ack(ws).next_line == 4
        logs = client.get(f"/jobs/{job_id}/tasks/chief:0/logs", headers=ADMIN).json()
        assert logs["lines"][0] == "a" * 256
        assert len(logs["lines"][1]) == 256
        assert logs["lines"][1].endswith("more characters]")
        assert logs["lines"][2:] == ["one ⏎ two", "last"]  # a line stays one line


# --- numbers past the database columns ------------------------------------------------------


def test_a_pid_past_the_database_column_is_refused_and_the_agent_goes_on(
    database_url: str, tmp_path: Path
) -> None:
    """Found by the fuzzer: on PostgreSQL it failed the UPDATE and crashed the channel."""
    with app_client(database_url, tmp_path, reconcile_seconds=0.05) as client:
        with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
            ws.send_text(hello_frame())
            assert isinstance(server_message.validate_json(ws.receive_text()), Welcome)
            submit(client)
            start = server_message.validate_json(ws.receive_text())
            assert isinstance(start, StartTask)
            frame = json.loads(TaskStarted(key=start.key, pid=1).model_dump_json())
            ws.send_text(json.dumps({**frame, "pid": 2**40}))
            refused = closed(ws)
        assert refused.code == 1002 and refused.reason.startswith(
            "invalid frame: task_started.pid: Input should be less"
        )
        with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
            ws.send_text(hello_frame())
            assert isinstance(server_message.validate_json(ws.receive_text()), Welcome)
            ws.send_text(TaskStarted(key=start.key, pid=4242).model_dump_json())
            ws.send_text(logs_frame(["ok"], key=start.key))
            assert ack(ws).next_line == 1
            # Starts are applied by the controller's next pass.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                job = client.get(f"/jobs/{start.key.job_id}", headers=ADMIN).json()
                if job["tasks"][0]["pid"] is not None:
                    break
                time.sleep(0.05)
        assert job["tasks"][0]["pid"] == 4242


def test_limits_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_AGENT_FRAME_BYTES", "1234")
    monkeypatch.setenv("STRATA_MAX_STREAMS_PER_TOKEN", "7")
    settings = Settings()
    assert (settings.agent_frame_bytes, settings.max_streams_per_token) == (1234, 7)
    assert settings.max_metric_batch_points == 5_000
