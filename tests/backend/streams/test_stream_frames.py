"""The stream frames as models: documented in the OpenAPI document, built once and sent as
before; and a stream whose client never subscribes is closed with what to send."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from agents.protocol import CheckpointSaved, MetricBatch, MetricPoint
from backend.api.streams import document_frames
from backend.app import create_app
from backend.config import Settings
from backend.jobs.models import JobEvent
from backend.streams.frames import MetricsFrame, ServerFrame, StreamFrame
from backend.streams.history import log_frame
from backend.streams.ingest import metrics_frame
from backend.streams.publishing import event_frame
from tests.conftest import ADMIN_TOKEN, make_settings
from tests.support.factories import make_spec
from tests.support.runtime_channel import reply, runtime

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
FRAMES = (
    "CheckpointFrame",
    "EventFrame",
    "HistoryEndFrame",
    "LogFrame",
    "MetricsFrame",
    "UsageFrame",
)


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(database_url, tmp_path / "data", stream_subscribe_seconds=0.3)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def documented(tmp_path: Path) -> dict[str, Any]:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    document_frames(app)
    schema: dict[str, Any] = app.openapi()
    return schema


def wire_validator(schema: dict[str, Any]) -> jsonschema_rs.Validator:
    """Checks a frame as received against the StreamFrame schema of the OpenAPI document."""
    document = {"$ref": "#/components/schemas/StreamFrame", "components": schema["components"]}
    return jsonschema_rs.Draft202012Validator(document)


# --- subscribing ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/jobs/{job_id}/stream", "/stream"])
def test_a_client_that_never_subscribes_is_told_what_to_send(client: TestClient, path: str) -> None:
    job_id = client.post("/jobs", json=make_spec(), headers=ADMIN).json()["id"]
    url = path.format(job_id=job_id)
    with (
        client.websocket_connect(f"{url}?token={ADMIN_TOKEN}") as ws,
        pytest.raises(WebSocketDisconnect) as closed,
    ):
        ws.receive_text()
    assert closed.value.code == 1008
    assert closed.value.reason == (
        'expected a subscribe frame within 0.3s: {"type": "subscribe", "cursor": null}'
    )


def test_the_subscribe_wait_defaults_to_five_seconds() -> None:
    assert Settings().stream_subscribe_seconds == 5.0


def test_a_subscribe_frame_in_time_is_served(client: TestClient) -> None:
    with client.websocket_connect(f"/stream?token={ADMIN_TOKEN}") as ws:
        ws.send_text(json.dumps({"type": "subscribe", "cursor": None}))
        assert json.loads(ws.receive_text())["type"] == "history_end"


# --- the OpenAPI document -------------------------------------------------------------------


def test_the_frames_are_in_the_openapi_components(tmp_path: Path) -> None:
    components = documented(tmp_path)["components"]["schemas"]
    union = components["StreamFrame"]
    assert union["discriminator"]["propertyName"] == "type"
    assert sorted(ref["$ref"].rsplit("/", 1)[1] for ref in union["oneOf"]) == sorted(FRAMES)
    for name in FRAMES:
        # The cursor is spliced in per subscriber, but every frame on the wire has it.
        assert "cursor" in components[name]["required"], name
        assert components[name]["properties"]["type"]["const"]
    assert components["Subscribe"]["required"] == ["type"]
    assert components["Subscribe"]["additionalProperties"] is False


def test_definitions_the_frames_share_with_rest_are_the_same(tmp_path: Path) -> None:
    plain = create_app(Settings(data_dir=tmp_path / "data")).openapi()["components"]["schemas"]
    plain = json.loads(json.dumps(plain))  # before the frames are added to the same dict
    extended = documented(tmp_path)["components"]["schemas"]
    assert "CheckpointRead" in plain
    for name, definition in plain.items():
        assert extended[name] == definition, name


def test_documenting_twice_changes_nothing(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    document_frames(app)
    first = json.dumps(app.openapi(), sort_keys=True)
    document_frames(app)
    assert json.dumps(app.openapi(), sort_keys=True) == first


# --- on the wire ----------------------------------------------------------------------------


def test_every_frame_on_a_job_stream_matches_its_schema(client: TestClient, tmp_path: Path) -> None:
    validator = wire_validator(documented(tmp_path))
    job_id = client.post("/jobs", json=make_spec("mirrored"), headers=ADMIN).json()["id"]
    seen: list[dict[str, Any]] = []

    def receive(ws: Any) -> dict[str, Any]:
        text = ws.receive_text()
        validator.validate(json.loads(text))
        frame: dict[str, Any] = json.loads(text)
        seen.append(frame)
        return frame

    points = MetricBatch(
        points=[
            MetricPoint(seq=0, name="loss", step=1, value=0.5, wall_time=1.7e9),
            MetricPoint(seq=1, name="loss", step=2, value=math.nan, wall_time=1.7e9 + 1),
        ]
    )
    checkpoint = CheckpointSaved(
        name="ckpt-1", step=2, epoch=0, size_bytes=10, wall_time=1.7e9, trigger="epoch"
    )
    with runtime(client, job_id) as task:
        reply(task)
        task.send_text(points.model_dump_json())
        reply(task)
        client.app.state.logs.append(job_id, "chief:0", 0, 0, ["hello"])  # type: ignore[attr-defined]
        with client.websocket_connect(f"/jobs/{job_id}/stream?token={ADMIN_TOKEN}") as ws:
            ws.send_text('{"type": "subscribe"}')
            while receive(ws)["type"] != "history_end":
                pass
            task.send_text(checkpoint.model_dump_json())
            reply(task)
            assert receive(ws)["type"] == "checkpoint"
    kinds = {frame["type"] for frame in seen}
    assert kinds == {"event", "metrics", "log", "checkpoint", "history_end"}
    metrics = next(frame for frame in seen if frame["type"] == "metrics")
    assert metrics["series"]["loss"][1] == [0.5, None]  # NaN travels as null


def test_an_event_frame_is_sent_as_it_always_was() -> None:
    at = datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)
    row = JobEvent(
        id=7,
        job_id=3,
        at=at,
        kind="status",
        task=None,
        from_status="pending",
        to_status="cancelled",
        message="cancelled by request",
        data={"why": ["a", 1]},
        actor="alice",
    )
    sent = json.loads(event_frame(row).text("CUR"))
    assert sent == {
        "type": "event",
        "job_id": 3,
        "event": {
            "id": 7,
            "at": "2026-11-22T10:00:00.123456+00:00",  # isoformat, as before the models
            "kind": "status",
            "task": None,
            "from_status": "pending",
            "to_status": "cancelled",
            "message": "cancelled by request",
            "data": {"why": ["a", 1]},
            "actor": "alice",  # who caused it through the API (null: the system)
        },
        "cursor": "CUR",
    }
    assert list(sent)[-1] == "cursor"


def test_a_checkpoint_event_that_is_not_a_checkpoint_goes_out_as_an_event() -> None:
    row = JobEvent(
        id=1, job_id=1, at=datetime.now(UTC), kind="checkpoint", data={"checkpoint": {"x": 1}}
    )
    assert json.loads(event_frame(row).text("c"))["type"] == "event"


def test_metrics_and_log_frames_keep_their_fields() -> None:
    points = [
        MetricPoint(seq=4, name="loss", step=40, value=math.inf, wall_time=1.5e9),
        MetricPoint(seq=5, name="acc", step=40, value=0.25, wall_time=1.5e9),
    ]
    assert json.loads(metrics_frame((1, "worker:0", 2), points).text("c")) == {
        "type": "metrics",
        "task": "worker:0",
        "attempt": 2,
        "last_seq": 5,
        "series": {"loss": [[40], [None], [1.5e9]], "acc": [[40], [0.25], [1.5e9]]},
        "cursor": "c",
    }
    assert json.loads(log_frame("ps:0", 1, 10, ["a", "b"]).text("c")) == {
        "type": "log",
        "task": "ps:0",
        "attempt": 1,
        "first_line": 10,
        "lines": ["a", "b"],
        "cursor": "c",
    }


def test_a_frame_is_serialised_once_for_all_subscribers(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = metrics_frame(
        (1, "chief:0", 0), [MetricPoint(seq=0, name="loss", step=1, value=1.0, wall_time=1.0)]
    )
    dumps: list[ServerFrame] = []
    original = MetricsFrame.model_dump_json

    def counted(self: MetricsFrame, **kwargs: Any) -> str:
        dumps.append(self)
        return original(self, **kwargs)

    monkeypatch.setattr(MetricsFrame, "model_dump_json", counted)
    texts = [frame.text(f"cursor-{n}") for n in range(3)]
    assert len(dumps) == 1
    assert [json.loads(text)["cursor"] for text in texts] == ["cursor-0", "cursor-1", "cursor-2"]


def test_frames_parse_back_as_the_union() -> None:
    frame = log_frame("chief:0", 0, 0, ["x"])
    parsed = StreamFrame.model_validate_json(frame.text("c")).root  # the cursor is ignored
    assert type(parsed) is type(frame) and parsed.model_dump() == frame.model_dump()
