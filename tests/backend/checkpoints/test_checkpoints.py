"""Checkpoint reports in through the runtime channel; the list, checkpoint-now, the evaluator
controls and the 409s, through the API (both databases)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from agents.protocol import (
    CheckpointAck,
    CheckpointSaved,
    Command,
    CommandFailed,
    TaskWelcome,
)
from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.scheduling.transaction import Transaction
from tests.conftest import ADMIN_TOKEN
from tests.support.factories import make_spec
from tests.support.runtime_channel import reply, runtime

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def submit(client: TestClient, base: str = "parameter_server", **overrides: Any) -> int:
    response = client.post("/jobs", json=make_spec(base, **overrides), headers=ADMIN)
    assert response.status_code == 201, response.text
    job_id: int = response.json()["id"]
    return job_id


def set_status(client: TestClient, job_id: int, status: JobStatus) -> None:
    async def arrange(tx: Transaction) -> None:
        job = await tx.session.get_one(Job, job_id)
        job.status = status  # arranged directly: placement is not under test here

    async def change() -> None:
        # Through the controller, as every job change: alongside its passes, a write from
        # outside would meet a job they changed (its version) and fail.
        await client.app.state.controller.apply(arrange)  # type: ignore[attr-defined]

    assert client.portal is not None
    client.portal.call(change)


@contextmanager
def welcomed(
    client: TestClient, job_id: int, task: str = "chief:0"
) -> Iterator[WebSocketTestSession]:
    with runtime(client, job_id, task) as ws:
        assert isinstance(reply(ws), TaskWelcome)
        yield ws


def saved(name: str, step: int, **fields: Any) -> CheckpointSaved:
    values: dict[str, Any] = {
        "name": name,
        "step": step,
        "epoch": step // 10,
        "size_bytes": 4096,
        "wall_time": 1.8e9 + step,
        "trigger": "epoch",
        "metrics": {"loss": 1.0 / (step + 1)},
    }
    values.update(fields)
    return CheckpointSaved(**values)


def checkpoint_dir(client: TestClient, job_id: int) -> Path:
    root: Path = client.app.state.settings.checkpoints  # type: ignore[attr-defined]
    return root / f"job-{job_id}"


def test_reports_are_stored_once_listed_newest_first_and_retention_is_recorded(
    client: TestClient,
) -> None:
    job_id = submit(client)
    with welcomed(client, job_id) as ws:
        for name, step in (("ckpt-1", 10), ("ckpt-2", 20), ("ckpt-2", 20)):  # one resent
            ws.send_text(saved(name, step).model_dump_json())
            assert reply(ws) == CheckpointAck(name=name)
        ws.send_text(saved("ckpt-3", 30, deleted=["ckpt-1"]).model_dump_json())
        assert reply(ws) == CheckpointAck(name="ckpt-3")

    listed = client.get(f"/jobs/{job_id}/checkpoints", headers=ADMIN).json()
    assert [c["name"] for c in listed] == ["ckpt-3", "ckpt-2"]
    assert listed[0]["path"] == str(checkpoint_dir(client, job_id) / "ckpt-3")
    assert (listed[0]["step"], listed[0]["epoch"], listed[0]["size_bytes"]) == (30, 3, 4096)
    assert listed[0]["trigger"] == "epoch"
    assert listed[0]["metrics"] == {"loss": pytest.approx(1 / 31)}
    every = client.get(
        f"/jobs/{job_id}/checkpoints", params={"include_deleted": True}, headers=ADMIN
    ).json()
    deleted = {c["name"]: c["deleted_at"] for c in every}
    assert deleted["ckpt-1"] is not None and deleted["ckpt-2"] is None

    # The job stream carries each checkpoint once, typed "checkpoint", in its history.
    with client.websocket_connect(f"/jobs/{job_id}/stream", headers=ADMIN) as stream:
        stream.send_text(json.dumps({"type": "subscribe"}))
        frames = []
        while (frame := json.loads(stream.receive_text()))["type"] != "history_end":
            frames.append(frame)
    names = [f["checkpoint"]["name"] for f in frames if f["type"] == "checkpoint"]
    assert names == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert [f["deleted"] for f in frames if f["type"] == "checkpoint"][-1] == ["ckpt-1"]


def test_a_report_with_a_path_instead_of_a_name_closes_the_channel(client: TestClient) -> None:
    job_id = submit(client)
    with welcomed(client, job_id) as ws:
        frame = saved("ckpt-1", 1).model_dump(mode="json") | {"name": "../../etc/passwd"}
        ws.send_text(json.dumps(frame))
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert closed.value.code == 1002
    assert "name" in closed.value.reason
    assert client.get(f"/jobs/{job_id}/checkpoints", headers=ADMIN).json() == []


def post_in_thread(
    client: TestClient, path: str, **kwargs: Any
) -> tuple[threading.Thread, list[httpx.Response]]:
    answers: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: answers.append(client.post(path, headers=ADMIN, **kwargs)), daemon=True
    )
    thread.start()
    return thread, answers


def test_checkpoint_now_reaches_the_chief_and_answers_when_it_is_written(
    client: TestClient,
) -> None:
    job_id = submit(client)
    set_status(client, job_id, JobStatus.running)
    with welcomed(client, job_id) as ws:
        thread, answers = post_in_thread(client, f"/jobs/{job_id}/checkpoint")
        command = reply(ws)
        assert isinstance(command, Command) and command.action == "checkpoint"
        ws.send_text(
            saved("ckpt-4", 40, trigger="command", command_id=command.id).model_dump_json()
        )
        assert reply(ws) == CheckpointAck(name="ckpt-4")
        thread.join(10)
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["command_id"] == command.id and body["task"] == "chief:0"
    assert body["checkpoint"]["name"] == "ckpt-4"
    assert body["checkpoint"]["trigger"] == "command"
    assert 0 <= body["seconds"] < 10


def test_checkpoint_now_reports_the_runtime_failure_and_a_timeout(client: TestClient) -> None:
    job_id = submit(client)
    set_status(client, job_id, JobStatus.running)
    with welcomed(client, job_id) as ws:
        thread, answers = post_in_thread(client, f"/jobs/{job_id}/checkpoint")
        command = reply(ws)
        assert isinstance(command, Command)
        ws.send_text(CommandFailed(id=command.id, reason="disk full").model_dump_json())
        thread.join(10)
        assert answers[0].status_code == 502
        assert "disk full" in answers[0].json()["detail"]

        thread, answers = post_in_thread(
            client, f"/jobs/{job_id}/checkpoint", params={"wait_seconds": 0.3}
        )
        assert isinstance(reply(ws), Command)  # the runtime stays silent
        thread.join(10)
        assert answers[0].status_code == 504
        assert "within 0.3s" in answers[0].json()["detail"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (JobStatus.pending, "job {id} is pending"),
        (JobStatus.succeeded, "job {id} is succeeded"),
        (JobStatus.running, "runtime of chief:0 is not connected"),
    ],
)
def test_checkpoint_now_is_refused_with_a_reason(
    client: TestClient, status: JobStatus, expected: str
) -> None:
    job_id = submit(client)
    set_status(client, job_id, status)
    answer = client.post(f"/jobs/{job_id}/checkpoint", headers=ADMIN)
    assert answer.status_code == 409
    assert expected.format(id=job_id) in answer.json()["detail"]


def test_checkpoint_now_is_refused_under_multi_worker_mirrored(client: TestClient) -> None:
    job_id = submit(client, "multi_worker_mirrored")
    set_status(client, job_id, JobStatus.running)
    answer = client.post(f"/jobs/{job_id}/checkpoint", headers=ADMIN)
    assert answer.status_code == 409
    assert "multi_worker_mirrored" in answer.json()["detail"]


def test_evaluator_requests_that_cannot_be_met_get_409(client: TestClient) -> None:
    no_checkpoints = submit(client, checkpoint={"every_epochs": None})
    answer = client.post(
        f"/jobs/{no_checkpoints}/evaluator", json={"action": "start"}, headers=ADMIN
    )
    assert answer.status_code == 409
    assert "writes no checkpoints" in answer.json()["detail"]

    job_id = submit(client)
    stop = client.post(f"/jobs/{job_id}/evaluator", json={"action": "stop"}, headers=ADMIN)
    assert stop.status_code == 409 and "no sidecar evaluator" in stop.json()["detail"]

    set_status(client, job_id, JobStatus.cancelled)
    start = client.post(f"/jobs/{job_id}/evaluator", json={"action": "start"}, headers=ADMIN)
    assert start.status_code == 409 and "cancelled" in start.json()["detail"]

    bad = client.post(f"/jobs/{job_id}/evaluator", json={"action": "pause"}, headers=ADMIN)
    assert bad.status_code == 422


def test_an_evaluator_asked_for_before_placement_waits_for_the_job(client: TestClient) -> None:
    job_id = submit(client)
    answer = client.post(f"/jobs/{job_id}/evaluator", json={"action": "start"}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    tasks = {t["name"]: t["status"] for t in answer.json()["tasks"]}
    assert tasks["evaluator:0"] == "pending"
    again = client.post(f"/jobs/{job_id}/evaluator", json={"action": "start"}, headers=ADMIN)
    assert again.status_code == 409 and "already pending" in again.json()["detail"]
    stopped = client.post(f"/jobs/{job_id}/evaluator", json={"action": "stop"}, headers=ADMIN)
    assert {t["name"]: t["status"] for t in stopped.json()["tasks"]}["evaluator:0"] == "stopped"


def test_restart_of_a_cancelled_job_is_refused(client: TestClient) -> None:
    job_id = submit(client)
    assert client.post(f"/jobs/{job_id}/cancel", headers=ADMIN).status_code == 200
    answer = client.post(f"/jobs/{job_id}/restart", headers=ADMIN)
    assert answer.status_code == 409 and "cancelled" in answer.json()["detail"]
