"""Suspend and resume through the API (both databases): the interruption's checkpoint asked
of the chief's runtime, the job's tasks unplaced with no restart counted, and the refusals."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from agents.protocol import Ack, CheckpointAck, Command, CommandFailed, MetricBatch, MetricPoint
from backend.jobs.states import JobStatus
from backend.scheduling.interruptions import HOLD_MARGIN_SECONDS
from tests.backend.checkpoints.test_checkpoints import (
    ADMIN,
    post_in_thread,
    saved,
    set_status,
    submit,
    welcomed,
)
from tests.support.runtime_channel import reply


def read(client: TestClient, job_id: int) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/jobs/{job_id}", headers=ADMIN).json()
    return job


def status_events(client: TestClient, job_id: int) -> list[dict[str, Any]]:
    events = client.get(f"/jobs/{job_id}/events", headers=ADMIN).json()
    return [e for e in events if e["kind"] == "status"]


def test_a_suspended_job_resumes_from_the_checkpoint_its_chief_wrote_when_asked(
    client: TestClient,
) -> None:
    job_id = submit(client)
    set_status(client, job_id, JobStatus.running)
    attempts = {t["name"]: t["attempt"] for t in read(client, job_id)["tasks"]}
    assert read(client, job_id)["actions"]["suspend"]
    with welcomed(client, job_id) as ws:
        # Steps it reported beyond the checkpoint are counted as lost (a runtime that held
        # its training reports none).
        points = [
            MetricPoint(seq=s, name="loss", step=48 + s, value=1.0, wall_time=1e9) for s in range(4)
        ]
        ws.send_text(MetricBatch(points=points).model_dump_json())
        assert reply(ws) == Ack(seq=3)
        thread, answers = post_in_thread(
            client, f"/jobs/{job_id}/suspend", params={"deadline_seconds": 20}
        )
        command = reply(ws)
        assert isinstance(command, Command) and command.action == "interrupt"
        assert command.hold_seconds == 20 + HOLD_MARGIN_SECONDS
        interruption = saved("ckpt-5", 50, trigger="interruption", command_id=command.id)
        ws.send_text(interruption.model_dump_json())
        assert reply(ws) == CheckpointAck(name="ckpt-5")
        thread.join(10)
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert job["status"] == "suspended"
    assert job["reason"] == (
        "suspended by request; resumes from checkpoint ckpt-5 at step 50 (1 step lost)"
    )
    assert job["restart_count"] == 0  # an interruption is no restart, and no failure
    assert {t["name"]: t["attempt"] for t in job["tasks"]} == {
        name: attempt + 1 for name, attempt in attempts.items()
    }
    assert {t["status"] for t in job["tasks"]} == {"pending"}
    assert all(t["host"] is None for t in job["tasks"])
    assert (job["actions"]["suspend"], job["actions"]["resume"]) == (False, True)
    event = status_events(client, job_id)[-1]
    assert event["data"]["interruption"] == "suspend"
    assert (event["data"]["checkpoint"], event["data"]["step"]) == ("ckpt-5", 50)
    assert event["data"]["steps_lost"] == 1
    assert event["actor"].startswith("admin")

    resumed = client.post(f"/jobs/{job_id}/resume", headers=ADMIN)
    assert resumed.status_code == 200, resumed.text
    assert (resumed.json()["status"], resumed.json()["reason"]) == ("pending", "resumed by request")
    again = client.post(f"/jobs/{job_id}/resume", headers=ADMIN)
    assert again.status_code == 409
    assert "only a suspended job can be resumed" in again.json()["detail"]
    audit = client.get("/audit", params={"job": job_id}, headers=ADMIN).json()["items"]
    assert {"job.suspend", "job.resume"} <= {entry["action"] for entry in audit}


def test_without_a_checkpoint_by_the_deadline_the_job_is_suspended_anyway_and_says_so(
    client: TestClient,
) -> None:
    job_id = submit(client)
    set_status(client, job_id, JobStatus.running)
    with welcomed(client, job_id) as ws:
        thread, answers = post_in_thread(
            client, f"/jobs/{job_id}/suspend", params={"deadline_seconds": 0.3}
        )
        assert isinstance(reply(ws), Command)  # the runtime stays silent
        thread.join(10)
    assert answers[0].status_code == 200, answers[0].text
    job = answers[0].json()
    assert job["status"] == "suspended"
    assert job["reason"] == (
        "suspended by request; resumes from no checkpoint (chief:0 wrote none within 0.3s); "
        "it resumes from its last backup"
    )


def test_a_runtime_that_cannot_write_it_and_one_not_connected_are_named(
    client: TestClient,
) -> None:
    job_id = submit(client)
    set_status(client, job_id, JobStatus.running)
    with welcomed(client, job_id) as ws:
        thread, answers = post_in_thread(client, f"/jobs/{job_id}/suspend")
        command = reply(ws)
        assert isinstance(command, Command)
        ws.send_text(CommandFailed(id=command.id, reason="disk full").model_dump_json())
        thread.join(10)
    assert "chief:0 could not write it: disk full" in answers[0].json()["reason"]

    other = submit(client)
    set_status(client, other, JobStatus.running)
    answer = client.post(f"/jobs/{other}/suspend", headers=ADMIN)
    assert "the runtime of chief:0 is not connected" in answer.json()["reason"]


def test_a_pending_job_is_suspended_at_once(client: TestClient) -> None:
    job_id = submit(client)
    answer = client.post(f"/jobs/{job_id}/suspend", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "suspended"
    assert f"job {job_id} is pending" in answer.json()["reason"]
    cancelled = client.post(f"/jobs/{job_id}/cancel", headers=ADMIN)
    assert cancelled.json()["status"] == "cancelled"


@pytest.mark.parametrize(
    ("overrides", "status", "expected"),
    [
        ({}, JobStatus.succeeded, "it is succeeded; only a job waiting for or holding"),
        ({}, JobStatus.suspended, "it is suspended"),
        (
            {"coordinator": "client", "replicas": {"worker": {"count": 1}, "ps": {"count": 1}}},
            JobStatus.running,
            "its coordinator is a client",
        ),
    ],
)
def test_suspend_is_refused_with_the_reason(
    client: TestClient, overrides: dict[str, Any], status: JobStatus, expected: str
) -> None:
    job_id = submit(client, **overrides)
    set_status(client, job_id, status)
    answer = client.post(f"/jobs/{job_id}/suspend", headers=ADMIN)
    assert answer.status_code == 409
    detail = answer.json()["detail"]
    assert detail.startswith(f"job {job_id} cannot be suspended: ") and expected in detail
    assert not read(client, job_id)["actions"]["suspend"]
