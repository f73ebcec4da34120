"""Fuzzing every websocket channel: whatever a peer sends, the server answers or closes with
the right code and a reason, raises nothing, and keeps serving everyone else.

Each example opens a connection, sends a few generated frames (random text, binary,
truncated, oversized, wrong-typed, and valid frames in the wrong place), then a probe that a
live connection answers. A model of the channel's rules (`expect_*`) says which close code the
frames must produce, or that the probe must be answered. After the examples a well-behaved
client still gets its answers and /healthz is 200, and nothing was logged at ERROR.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from agents.protocol import (
    PROTOCOL_VERSION,
    Ack,
    CheckpointAck,
    CheckpointSaved,
    CommandFailed,
    Heartbeat,
    Hello,
    LogsAck,
    MetricBatch,
    MetricPoint,
    RunningTask,
    TaskExit,
    TaskExited,
    TaskHello,
    TaskKey,
    TaskLogs,
    TaskStarted,
    TaskWelcome,
    Welcome,
    agent_message,
    runtime_message,
    runtime_server_message,
    server_message,
)
from backend.api.streams import Subscribe
from backend.app import create_app
from backend.streams.broker import CLUSTER_TOPIC, Broker, job_topic
from backend.streams.cursor import Cursor, InvalidCursor
from backend.streams.frames import EventFrame, StreamEvent
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.factories import make_spec
from tests.support.runtime_channel import task_token

AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Small frame limits, so that oversized frames are cheap to make.
AGENT_FRAME = 4_096
RUNTIME_FRAME = 4_096
STREAM_FRAME = 2_048

# The server's controller draws jitter from `random` on its own thread while examples are made.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning"
)

FUZZ = settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Frame = str | bytes
Outcome = tuple[int, str] | None  # the close code and the start of its reason, or alive


@pytest.fixture
def client(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> Iterator[TestClient]:
    settings = make_settings(
        database_url,
        tmp_path / "data",
        agent_frame_bytes=AGENT_FRAME,
        runtime_frame_bytes=RUNTIME_FRAME,
        stream_frame_bytes=STREAM_FRAME,
        reconcile_seconds=0.05,
    )
    with caplog.at_level(logging.WARNING), TestClient(create_app(settings)) as test_client:
        yield test_client
        # A well-behaved client on the same app still works.
        assert test_client.get("/healthz").status_code == 200
        with test_client.websocket_connect("/agents/connect", headers=AGENT) as ws:
            ws.send_text(hello_frame("after-the-fuzz"))
            assert isinstance(server_message.validate_json(ws.receive_text()), Welcome)
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not failures, [r.getMessage() for r in failures]


def hello_frame(name: str = "fuzz-agent") -> str:
    return Hello(
        name=name,
        identity="fuzz-agent-identity",
        address="10.0.0.9",
        port_range=(51000, 51009),
        version="fuzz",
    ).model_dump_json()


def job_one(client: TestClient) -> int:
    """Job 1 (submitted on first use): one chief without GPUs, which the fuzzing agent gets."""
    if client.get("/jobs/1", headers=ADMIN).status_code == 404:
        spec = make_spec(
            "mirrored", replicas={"chief": {"count": 1, "gpus": 0}}, restart={"policy": "never"}
        )
        response = client.post("/jobs", json=spec, headers=ADMIN)
        assert response.status_code == 201, response.text
        assert response.json()["id"] == 1
    return 1


# --- frames ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
# Mostly values a well-behaved peer sends, so that frames get deep into the server, and
# now and then one past a bound (of the protocol, of a database column, of datetime).
ints = st.one_of(
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(0, 3),
    st.sampled_from([-1, 2**31 - 1, 2**31, 2**40, 2**62, 2**63 - 1, 2**63, 2**64]),
    st.integers(-(2**70), 2**70),
)
floats = st.one_of(
    st.sampled_from([1.7e9, 0.5]),
    st.sampled_from([1.7e9, 0.5]),
    st.sampled_from([0.0, -1.0, 1e300, float("nan"), float("inf"), -float("inf")]),
    st.floats(),
)
task_names = st.one_of(
    st.sampled_from(["chief:0", "worker:1", "ps:0", "evaluator:0"]), st.text(max_size=12)
)
texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["a\nb", "a\r\nb", "\r", "\x00", "é" * 30, "\u2028"]),
)
keys = st.fixed_dictionaries({"job_id": ints, "task": task_names, "attempt": ints})


EXTREMES: list[Any] = [
    -1,
    0,
    2**31,
    2**40,
    2**63,
    2**64,
    1e300,
    -1e300,
    None,
    "",
    "x" * 300,
    [],
    {},
]


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    if isinstance(value, list) and value:
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*path, i))]
    return [path]


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


def mutated(document: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A valid document with one value, at any depth, replaced by an extreme or any JSON
    value, or with a field dropped or added."""
    fields = sorted(document)

    def drop(field: str) -> dict[str, Any]:
        return {k: v for k, v in document.items() if k != field}

    return st.one_of(
        st.builds(
            lambda path, new: _replaced(document, path, new),
            st.sampled_from(_leaves(document)),
            st.sampled_from(EXTREMES) | st.sampled_from(EXTREMES) | json_values,
        ),
        st.builds(drop, st.sampled_from(fields)),
        st.builds(
            lambda key, new: {**document, key: new}, st.text(min_size=1, max_size=8), json_values
        ),
    )


def junk(valid: list[str], limit: int) -> st.SearchStrategy[Frame]:
    """Frames no well-behaved peer sends: random, binary, truncated, oversized, wrong-typed."""
    documents = [json.loads(frame) for frame in valid]
    return st.one_of(
        st.text(max_size=100),
        st.binary(max_size=100),
        st.sampled_from(["", "null", "[]", "{}", "1e999", '{"type": null}', '"hello"']),
        st.builds(
            lambda frame, cut: frame[: int(len(frame) * cut)],
            st.sampled_from(valid),
            st.floats(0, 0.99),
        ),
        st.builds(
            lambda extra, frame: frame[:-1] + ', "pad": "' + "x" * (limit + extra) + '"}',
            st.integers(0, 50),
            st.sampled_from(valid),
        ),
        st.one_of(*[mutated(document) for document in documents]).map(json.dumps),
        st.one_of(*[mutated(document) for document in documents]).map(json.dumps),
    )


def dumps(strategy: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Frame]:
    return strategy.map(json.dumps)


def model_close(
    frame: Frame, first: bool, adapter: TypeAdapter[Any], limit: int, what: str
) -> tuple[Outcome, Any]:
    """The close a frame must cause under the channel rules, or None and the parsed message."""
    if isinstance(frame, bytes):
        return (1003, "binary frames are not accepted"), None
    if len(frame) > limit:
        return (1009, f"{what} frame over" if first else "frame over"), None
    try:
        return None, adapter.validate_json(frame)
    except ValidationError as exc:
        if first:
            return (1008, f"invalid {what} frame"), None
        too_long = any(e["type"] in ("too_long", "string_too_long") for e in exc.errors())
        return ((1009, "frame over a limit") if too_long else (1002, "invalid frame")), None


def send(ws: WebSocketTestSession, frame: Frame) -> None:
    if isinstance(frame, bytes):
        ws.send_bytes(frame)
    else:
        ws.send_text(frame)


def read_until(
    ws: WebSocketTestSession, expected: Outcome, answered: Callable[[str], bool]
) -> None:
    """Read until the probe is answered (alive expected) or the socket closes as expected."""
    try:
        while True:
            text = ws.receive_text()
            if answered(text) and expected is None:
                return
    except WebSocketDisconnect as closed:
        assert expected is not None, f"closed unexpectedly: {closed.code} {closed.reason!r}"
        code, reason = expected
        assert (closed.code, closed.reason[: len(reason)]) == (code, reason), closed.reason


# --- the agent channel ----------------------------------------------------------------------

running = st.fixed_dictionaries({"key": keys, "pid": ints})
agent_valid = st.one_of(
    dumps(
        st.fixed_dictionaries(
            {"type": st.just("heartbeat"), "running": st.lists(running, max_size=3)}
        )
    ),
    dumps(st.fixed_dictionaries({"type": st.just("task_started"), "key": keys, "pid": ints})),
    dumps(
        st.fixed_dictionaries(
            {
                "type": st.just("task_exited"),
                "exit": st.fixed_dictionaries(
                    {
                        "key": keys,
                        "exit_code": st.none() | ints,
                        "signal": st.none() | ints,
                        "error": st.none() | texts,
                        "log_tail": st.lists(texts, max_size=3),
                    }
                ),
            }
        )
    ),
    dumps(
        st.fixed_dictionaries(
            {
                "type": st.just("task_logs"),
                "key": keys,
                "first_line": ints,
                "lines": st.lists(texts, max_size=4),
            }
        )
    ),
    st.just(hello_frame()),  # a second hello
)
PROBE_KEY = TaskKey(job_id=1, task="evaluator:9", attempt=0)
CHIEF = TaskKey(job_id=1, task="chief:0", attempt=0)  # job 1's task, placed on this agent
AGENT_SAMPLES = [
    hello_frame(),
    TaskLogs(key=PROBE_KEY, first_line=0, lines=["a", "b"]).model_dump_json(),
    TaskStarted(key=CHIEF, pid=4242).model_dump_json(),
    TaskExited(
        exit=TaskExit(key=CHIEF, exit_code=1, signal=None, error="e", log_tail=["x"])
    ).model_dump_json(),
    Heartbeat(running=[RunningTask(key=CHIEF, pid=4242)]).model_dump_json(),
    '{"type": "heartbeat", "running": [{"key": {"job_id": 1, "task": "chief:0", "attempt": 0},'
    ' "pid": 7}]}',
]
agent_frames = st.one_of(agent_valid, junk(AGENT_SAMPLES, AGENT_FRAME))


def expect_agent(frames: list[Frame]) -> Outcome:
    for position, frame in enumerate(frames):
        outcome, message = model_close(frame, position == 0, agent_message, AGENT_FRAME, "hello")
        if outcome is not None:
            return outcome
        if position == 0 and not isinstance(message, Hello):
            return (1008, "the first frame must be hello")
        if position == 0 and message.protocol != PROTOCOL_VERSION:
            return (1008, f"agent protocol {message.protocol} is not this server's")
        if position == 0 and message.identity is None:
            return (1008, "this agent presented no identity")
        if position > 0 and isinstance(message, Hello):
            return (1008, "hello may only be sent once")
    return None


def _with(sample: str, **fields: Any) -> str:
    return json.dumps({**json.loads(sample), **fields})


# What the fuzzer found, kept as explicit examples: each crashed the channel before the fix.
@example(first=_with(hello_frame(), protocol=-1), rest=[])  # another protocol: refused
@example(first=hello_frame(), rest=[b"\x00binary"])  # KeyError: 'text'
# pid and job id past the database columns (PostgreSQL: DataError)
@example(first=hello_frame(), rest=[_with(AGENT_SAMPLES[2], pid=2**40)])
@example(
    first=hello_frame(), rest=[_with(AGENT_SAMPLES[2], key={**CHIEF.model_dump(), "job_id": 2**40})]
)
@FUZZ
@given(
    first=st.one_of(st.just(hello_frame()), agent_frames),
    rest=st.lists(agent_frames, max_size=3),
)
def test_agent_channel_survives_any_frames(
    client: TestClient, first: Frame, rest: list[Frame]
) -> None:
    job_one(client)
    frames = [first, *rest]
    expected = expect_agent(frames)
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        for frame in frames:
            send(ws, frame)
        probe = TaskLogs(key=PROBE_KEY, first_line=10**6, lines=["probe"]).model_dump_json()
        send(ws, probe)

        def answered(text: str) -> bool:
            reply = server_message.validate_json(text)
            return isinstance(reply, LogsAck) and reply.key == PROBE_KEY

        read_until(ws, expected, answered)


# --- the runtime channel --------------------------------------------------------------------

points = st.fixed_dictionaries(
    {
        "seq": ints,
        "name": st.sampled_from(["loss", "a/b:c", "x" * 129]) | st.text(max_size=10),
        "step": ints,
        "value": floats,
        "wall_time": floats,
    }
)
checkpoint_names = st.one_of(
    st.sampled_from(["ckpt-1", "ckpt-2", "ckpt-3"]),
    st.sampled_from(["../etc", "a" * 201, ""]) | st.text(max_size=8),
)
runtime_valid = st.one_of(
    dumps(
        st.fixed_dictionaries({"type": st.just("metrics"), "points": st.lists(points, max_size=3)})
    ),
    dumps(
        st.fixed_dictionaries(
            {
                "type": st.just("checkpoint"),
                "name": checkpoint_names,
                "step": ints,
                "epoch": st.none() | ints,
                "size_bytes": ints,
                "wall_time": floats,
                "trigger": st.sampled_from(["epoch", "time", "command", "end", "epoch", "never"]),
                "command_id": st.none() | ints,
                "metrics": st.dictionaries(
                    st.sampled_from(["loss", "acc", "?"]), floats, max_size=2
                ),
                "deleted": st.lists(checkpoint_names, max_size=2),
            }
        )
    ),
    dumps(st.fixed_dictionaries({"type": st.just("command_failed"), "id": ints, "reason": texts})),
    st.just(TaskHello(task="chief:0", attempt=0).model_dump_json()),  # a second hello
)
RUNTIME_SAMPLES = [
    TaskHello(task="chief:0", attempt=0).model_dump_json(),
    MetricBatch(
        points=[MetricPoint(seq=0, name="loss", step=1, value=0.5, wall_time=1.7e9)]
    ).model_dump_json(),
    CheckpointSaved(
        name="ckpt-1",
        step=10,
        epoch=1,
        size_bytes=100,
        wall_time=1.7e9,
        trigger="epoch",
        command_id=3,
        metrics={"loss": 0.5},
        deleted=["ckpt-0"],
    ).model_dump_json(),
    CommandFailed(id=3, reason="no").model_dump_json(),
]
runtime_frames = st.one_of(runtime_valid, junk(RUNTIME_SAMPLES, RUNTIME_FRAME))


def expect_runtime(frames: list[Frame]) -> Outcome:
    for position, frame in enumerate(frames):
        outcome, message = model_close(
            frame, position == 0, runtime_message, RUNTIME_FRAME, "task_hello"
        )
        if outcome is not None:
            return outcome
        if position == 0:
            if not isinstance(message, TaskHello):
                return (1008, "the first frame must be task_hello")
            if message.task != "chief:0" or message.attempt > 0:
                return (1008, f"job 1 has no {message.task} attempt {message.attempt}")
        elif isinstance(message, TaskHello):
            return (1008, "task_hello may only be sent once")
    return None


# a wall time past datetime (OverflowError), numbers past their columns
@example(first=RUNTIME_SAMPLES[0], rest=[_with(RUNTIME_SAMPLES[2], wall_time=1e300)], probe=1)
@example(first=RUNTIME_SAMPLES[0], rest=[_with(RUNTIME_SAMPLES[2], size_bytes=2**64)], probe=2)
@example(first=RUNTIME_SAMPLES[0], rest=[_with(RUNTIME_SAMPLES[2], epoch=2**40)], probe=3)
@example(first=RUNTIME_SAMPLES[0], rest=[b"\x00binary"], probe=4)
@FUZZ
@given(
    first=st.one_of(st.just(RUNTIME_SAMPLES[0]), runtime_frames),
    rest=st.lists(runtime_frames, max_size=3),
    probe=st.integers(0, 10**9),
)
def test_runtime_channel_survives_any_frames(
    client: TestClient, first: Frame, rest: list[Frame], probe: int
) -> None:
    job_id = job_one(client)
    frames = [first, *rest]
    expected = expect_runtime(frames)
    with client.websocket_connect("/tasks/connect", headers=task_token(client, job_id)) as ws:
        for frame in frames:
            send(ws, frame)
        name = f"probe-{probe}"
        send(
            ws,
            CheckpointSaved(
                name=name, step=1, size_bytes=1, wall_time=1.7e9, trigger="epoch"
            ).model_dump_json(),
        )

        def answered(text: str) -> bool:
            reply = runtime_server_message.validate_json(text)
            assert isinstance(reply, TaskWelcome | Ack | CheckpointAck), reply
            return isinstance(reply, CheckpointAck) and reply.name == name

        read_until(ws, expected, answered)


# --- the job stream and the cluster stream --------------------------------------------------

cursors = st.one_of(
    st.none(),
    st.just(Cursor().encode()),
    st.text(max_size=30),
    st.binary(max_size=30).map(lambda raw: base64.urlsafe_b64encode(raw).decode()),
)
subscribe_valid = dumps(st.fixed_dictionaries({"type": st.just("subscribe"), "cursor": cursors}))
STREAM_SAMPLES = [json.dumps({"type": "subscribe", "cursor": None})]
stream_frames = st.one_of(subscribe_valid, junk(STREAM_SAMPLES, STREAM_FRAME))
_subscribe = TypeAdapter(Subscribe)


def expect_stream(frames: list[Frame]) -> Outcome:
    """The first frame subscribes; later text frames within the limits are ignored."""
    for position, frame in enumerate(frames):
        if position > 0:
            if isinstance(frame, bytes):
                return (1003, "binary frames are not accepted")
            if len(frame) > STREAM_FRAME:
                return (1009, "frame over")
            continue
        outcome, message = model_close(frame, True, _subscribe, STREAM_FRAME, "subscribe")
        if outcome is not None:
            return outcome
        try:
            Cursor.decode(message.cursor)
        except InvalidCursor:
            return (1008, "invalid cursor")
    return None


def stream_probe(client: TestClient, topic: str, job_id: int, event_id: int) -> None:
    broker: Broker = client.app.state.broker  # type: ignore[attr-defined]
    event = StreamEvent(
        id=event_id,
        at=datetime.now(UTC),
        kind="probe",
        task=None,
        from_status=None,
        to_status=None,
        message=None,
        data={},
    )
    frame = EventFrame(type="event", job_id=job_id, event=event)
    client.portal.call(broker.publish, topic, frame)  # type: ignore[union-attr]


@example(which="job", first=STREAM_SAMPLES[0], rest=[b"\x00binary"], probe=10**12)
@example(which="cluster", first=b"\x00binary", rest=[], probe=10**12)
@FUZZ
@given(
    which=st.sampled_from(["job", "cluster"]),
    first=st.one_of(st.just(STREAM_SAMPLES[0]), stream_frames),
    rest=st.lists(stream_frames, max_size=3),
    probe=st.integers(10**12, 10**13),
)
def test_streams_survive_any_frames(
    client: TestClient, which: str, first: Frame, rest: list[Frame], probe: int
) -> None:
    job_id = job_one(client)
    path, topic = (
        (f"/jobs/{job_id}/stream", job_topic(job_id))
        if which == "job"
        else ("/stream", CLUSTER_TOPIC)
    )
    expected_first = expect_stream([first])
    expected = expect_stream([first, *rest])
    with client.websocket_connect(f"{path}?token={ADMIN_TOKEN}") as ws:
        send(ws, first)
        if expected_first is not None:
            read_until(ws, expected_first, lambda text: False)
            return
        read_until(ws, None, lambda text: json.loads(text)["type"] == "history_end")
        for frame in rest:
            send(ws, frame)
        stream_probe(client, topic, job_id, probe)

        def answered(text: str) -> bool:
            frame = json.loads(text)
            return bool(frame["type"] == "event" and frame["event"]["id"] == probe)

        read_until(ws, expected, answered)
