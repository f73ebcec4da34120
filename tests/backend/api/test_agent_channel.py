"""The agent channel, driven by a scripted agent over a real websocket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from agents.protocol import (
    PROTOCOL_VERSION,
    Device,
    Heartbeat,
    Hello,
    LogsAck,
    Refused,
    RunningTask,
    StartTask,
    StopTask,
    TaskExit,
    TaskExited,
    TaskKey,
    TaskLogs,
    TaskStarted,
    Welcome,
    server_message,
)
from backend.app import create_app
from backend.auth import Principal, TokenKind
from backend.scheduling.agent_reports import AgentReports
from backend.scheduling.controller import Controller
from backend.scheduling.native import RESEND_SECONDS
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.factories import make_spec

AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(database_url, tmp_path / "data", reconcile_seconds=0.05)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def hello(name: str = "fake-host", **extra: Any) -> str:
    """A hello from the agent of that name (the same identity each time, unless given)."""
    extra.setdefault("identity", f"identity-of-{name}-agent")
    extra.setdefault("address", "10.1.2.3")
    return Hello(
        name=name,
        port_range=(50000, 50009),
        devices=[
            Device(index=0, name="Simulated GPU", simulated=True),
            Device(index=1, name="Simulated GPU", simulated=True),
        ],
        version="test",
        **extra,
    ).model_dump_json()


def receive(ws: WebSocketTestSession) -> object:
    return server_message.validate_json(ws.receive_text())


def job_spec() -> dict[str, Any]:
    # One run each: these tests are about the channel, not about restarts.
    return make_spec(
        "mirrored",
        entrypoint=["python", "train.py"],
        env={"BATCH": "32"},
        restart={"policy": "never"},
    )


def test_wrong_token_is_closed_with_a_reason(client: TestClient) -> None:
    with (
        client.websocket_connect("/agents/connect", headers=ADMIN) as ws,
        pytest.raises(WebSocketDisconnect) as closed,
    ):
        ws.receive_text()
    assert closed.value.code == 1008
    assert closed.value.reason == "an agent token is required"


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ('{"type": "heartbeat", "running": []}', "the first frame must be hello, got heartbeat"),
        ('{"type": "hello", "name": "../x"}', "invalid hello"),
        ("not json", "invalid hello"),
    ],
)
def test_bad_first_frame_is_closed_with_a_reason(
    client: TestClient, frame: str, reason: str
) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(frame)
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert closed.value.code == 1008
    assert closed.value.reason.startswith(reason)


def test_an_agent_of_another_protocol_version_is_refused(client: TestClient) -> None:
    other = PROTOCOL_VERSION + 1
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello(protocol=other))
        refused = receive(ws)
        assert isinstance(refused, Refused)  # the agent gives up instead of reconnecting
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert closed.value.code == 1008
    assert closed.value.reason == refused.reason
    assert refused.reason.startswith(
        f"agent protocol {other} is not this server's {PROTOCOL_VERSION}: "
        "run the same Strata version on agent and server (agent test)"
    )
    assert client.get("/hosts", headers=ADMIN).json() == []  # it never joined


def test_a_job_runs_through_the_channel(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello())
        assert isinstance(receive(ws), Welcome)
        host = client.get("/hosts", headers=ADMIN).json()[0]
        assert (host["name"], host["status"], len(host["devices"])) == ("fake-host", "online", 2)

        job = client.post("/jobs", json=job_spec(), headers=ADMIN).json()
        start = receive(ws)
        assert isinstance(start, StartTask)
        key = TaskKey(job_id=job["id"], task="chief:0", attempt=0)
        assert start.key == key
        assert start.argv == ["python", "train.py"] and start.port == 50000 and start.gpus == [0]
        assert json.loads(start.env["TF_CONFIG"]) == {
            "cluster": {"chief": ["10.1.2.3:50000"]},
            "task": {"type": "chief", "index": 0},
        }
        assert start.env["CUDA_VISIBLE_DEVICES"] == "0"
        assert start.env["BATCH"] == "32" and start.env["STRATA_STRATEGY"] == "mirrored"
        tokens = client.app.state.tokens  # type: ignore[attr-defined]
        assert tokens.identify(start.env["STRATA_TASK_TOKEN"]) == Principal(
            TokenKind.task, job["id"]
        )

        ws.send_text(TaskStarted(key=key, pid=4242).model_dump_json())
        logs = TaskLogs(key=key, first_line=0, lines=["epoch=1 loss=0.9", "epoch=2 loss=0.5"])
        ws.send_text(logs.model_dump_json())
        ws.send_text(logs.model_dump_json())  # resent after a reconnect: stored once
        ws.send_text(
            TaskLogs(key=key, first_line=1, lines=["epoch=2 loss=0.5", "done"]).model_dump_json()
        )
        ws.send_text(Heartbeat(running=[RunningTask(key=key, pid=4242)]).model_dump_json())
        exit = TaskExit(key=key, exit_code=0, log_tail=["done"])
        ws.send_text(TaskExited(exit=exit).model_dump_json())
        ws.send_text(TaskExited(exit=exit).model_dump_json())  # applied once
        ws.send_text(Heartbeat(running=[]).model_dump_json())
        final = _wait(client, job["id"], "succeeded")

    assert final["tasks"][0]["pid"] == 4242 and final["tasks"][0]["exit_code"] == 0
    logs_page = client.get(f"/jobs/{job['id']}/tasks/chief:0/logs", headers=ADMIN).json()
    assert logs_page["lines"] == ["epoch=1 loss=0.9", "epoch=2 loss=0.5", "done"]
    events = client.get(f"/jobs/{job['id']}/events", headers=ADMIN).json()
    exits = [e for e in events if e["kind"] == "task_status" and e["data"].get("to") == "succeeded"]
    assert len(exits) == 1


@contextlib.contextmanager
def running_a_cancelled_job(client: TestClient) -> Iterator[tuple[WebSocketTestSession, TaskKey]]:
    """An agent reconnecting with the task of a job cancelled meanwhile, told to stop it."""
    job = client.post("/jobs", json=job_spec(), headers=ADMIN).json()
    client.post(f"/jobs/{job['id']}/cancel", headers=ADMIN)
    stale = TaskKey(job_id=job["id"], task="chief:0", attempt=0)
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello(running=[RunningTask(key=stale, pid=99)]))
        assert isinstance(receive(ws), Welcome)
        stop = receive(ws)
        assert isinstance(stop, StopTask) and stop.key == stale
        yield ws, stale


def test_reconnecting_agent_is_told_to_stop_what_should_not_run(client: TestClient) -> None:
    with running_a_cancelled_job(client):
        pass


def test_a_heartbeat_that_leaves_its_list_out_runs_what_was_last_listed(
    client: TestClient,
) -> None:
    with running_a_cancelled_job(client) as (ws, stale):
        # The agent goes on running it (its stop is slow), saying "unchanged": the stop is
        # due again once the server's resend time has passed, as with the full list.
        unchanged = Heartbeat(running_unchanged=True).model_dump_json()
        for _ in range(int(RESEND_SECONDS / 0.5) + 2):
            ws.send_text(unchanged)
            time.sleep(0.5)
        again = receive(ws)
        assert isinstance(again, StopTask) and again.key == stale


def test_a_heartbeat_with_a_list_cannot_also_say_it_is_unchanged(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello())
        assert isinstance(receive(ws), Welcome)
        key = TaskKey(job_id=1, task="chief:0", attempt=0)
        frame = {"type": "heartbeat", "running": [{"key": key.model_dump(), "pid": 1}]}
        ws.send_text(json.dumps({**frame, "running_unchanged": True}))
        with pytest.raises(WebSocketDisconnect) as closed:
            receive(ws)
    assert "running_unchanged: true comes with an empty running list" in closed.value.reason


def run_a_job(client: TestClient, ws: WebSocketTestSession) -> tuple[dict[str, Any], StartTask]:
    """The agent says hello, a job is submitted, and the agent starts its one task (pid 7)."""
    ws.send_text(hello())
    receive(ws)
    job = client.post("/jobs", json=job_spec(), headers=ADMIN).json()
    start = receive(ws)
    assert isinstance(start, StartTask)
    ws.send_text(TaskStarted(key=start.key, pid=7).model_dump_json())
    _wait(client, job["id"], "running")
    return job, start


def test_exits_reported_in_hello_are_applied(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        job, start = run_a_job(client, ws)
    # The channel dropped while the task crashed; the next hello carries the exit.
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        crashed = TaskExit(key=start.key, exit_code=137, signal=9, log_tail=["Killed"])
        ws.send_text(hello(finished=[crashed]))
        receive(ws)
        failed = _wait(client, job["id"], "failed")
    assert failed["reason"] == "chief:0 was killed by SIGKILL (exit code 137)"


def _wait(client: TestClient, job_id: int, status: str) -> dict[str, Any]:

    deadline = time.monotonic() + 10
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}", headers=ADMIN).json()
        if job["status"] == status:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is {job.get('status')}, not {status}")


def test_an_agent_cannot_speak_for_another_hosts_task(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        client.websocket_connect("/agents/connect", headers=AGENT) as owner,
        client.websocket_connect("/agents/connect", headers=AGENT) as other,
    ):
        owner.send_text(hello("host-a"))
        assert isinstance(receive(owner), Welcome)
        job = client.post("/jobs", json=job_spec(), headers=ADMIN).json()
        start = receive(owner)  # placed on host-a, the only host so far
        assert isinstance(start, StartTask)
        key = start.key
        other.send_text(hello("host-b"))
        assert isinstance(receive(other), Welcome)

        with caplog.at_level("WARNING", logger="strata.security"):
            other.send_text(TaskStarted(key=key, pid=1).model_dump_json())
            stop = receive(other)  # told not to run it; nothing else changes
            assert isinstance(stop, StopTask) and stop.key == key
            forged = TaskLogs(key=key, first_line=0, lines=["forged line"])
            other.send_text(forged.model_dump_json())
            ack = receive(other)  # acknowledged so that it is not resent, but not stored
            assert ack == LogsAck(key=key, next_line=1)
            exit = TaskExit(key=key, exit_code=1, log_tail=["forged"])
            other.send_text(TaskExited(exit=exit).model_dump_json())
            other.send_text(Heartbeat(running=[]).model_dump_json())

            # The owner's own report is taken as usual.
            owner.send_text(TaskStarted(key=key, pid=4242).model_dump_json())
            owner.send_text(TaskLogs(key=key, first_line=0, lines=["real"]).model_dump_json())
            assert receive(owner) == LogsAck(key=key, next_line=1)
            running = _wait(client, job["id"], "running")

    assert running["tasks"][0]["host"] == "host-a" and running["tasks"][0]["pid"] == 4242
    page = client.get(f"/jobs/{job['id']}/tasks/chief:0/logs", headers=ADMIN).json()
    assert page["lines"] == ["real"]
    refusals = [r.getMessage() for r in caplog.records if r.name == "strata.security"]
    what = f"chief:0 of job {job['id']} (attempt 0)"
    assert f"security: refused agent host-b: task_started for {what}" in refusals
    assert f"security: refused agent host-b: logs of {what}, which it does not run" in refusals
    assert f"security: refused agent host-b: task_exited for {what}" in refusals


def test_a_second_hello_closes_the_channel_before_later_frames_are_read(
    client: TestClient,
) -> None:
    """Frames are applied behind the reader; a second hello is refused as it arrives, so a
    garbled frame after it does not change the reason (found by the websocket fuzzer)."""
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello())
        assert isinstance(receive(ws), Welcome)
        ws.send_text(hello())
        ws.send_text("")
        with pytest.raises(WebSocketDisconnect) as closed:
            while True:
                receive(ws)
    assert (closed.value.code, closed.value.reason) == (1008, "hello may only be sent once")


# --- one name, one host ---------------------------------------------------------------------

CLONE = "identity-of-a-cloned-image"


def test_a_second_agent_under_a_connected_name_is_refused(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as owner:
        owner.send_text(hello())
        assert isinstance(receive(owner), Welcome)
        job = client.post("/jobs", json=job_spec(), headers=ADMIN).json()
        start = receive(owner)
        assert isinstance(start, StartTask)
        owner.send_text(TaskStarted(key=start.key, pid=4242).model_dump_json())
        _wait(client, job["id"], "running")

        with client.websocket_connect("/agents/connect", headers=AGENT) as clone:
            clone.send_text(hello(identity=CLONE, address="10.9.9.9"))
            refused = receive(clone)
            with pytest.raises(WebSocketDisconnect) as closed:
                clone.receive_text()
        assert isinstance(refused, Refused)  # the clone gives up instead of reconnecting
        assert refused.reason == (
            "fake-host is already connected from testclient with another identity; "
            "start this agent with another --name"
        )
        assert closed.value.code == 1008

        # The connected agent is undisturbed: it is still heard, and its job runs on.
        owner.send_text(Heartbeat(running=[RunningTask(key=start.key, pid=4242)]).model_dump_json())
        owner.send_text(TaskLogs(key=start.key, first_line=0, lines=["on"]).model_dump_json())
        assert receive(owner) == LogsAck(key=start.key, next_line=1)
        running = client.get(f"/jobs/{job['id']}", headers=ADMIN).json()
        (host,) = client.get("/hosts", headers=ADMIN).json()
    assert running["status"] == "running"
    assert [(t["status"], t["attempt"], t["pid"]) for t in running["tasks"]] == [
        ("running", 0, 4242)
    ]
    assert (host["address"], host["status"]) == ("10.1.2.3", "online")


def test_the_same_agent_reconnecting_replaces_its_old_connection(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as old:
        old.send_text(hello())
        assert isinstance(receive(old), Welcome)
        with client.websocket_connect("/agents/connect", headers=AGENT) as new:
            new.send_text(hello())
            assert isinstance(receive(new), Welcome)
            with pytest.raises(WebSocketDisconnect) as closed:
                old.receive_text()
    assert (closed.value.code, closed.value.reason) == (
        1000,
        "replaced by a newer connection from the same agent",
    )


def test_a_name_stays_held_between_connections_until_forgotten(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as owner:
        owner.send_text(hello())
        assert isinstance(receive(owner), Welcome)
    # Gone, but not yet noticed (its host is online until its heartbeats time out): another
    # machine cannot take the name while the first may be reconnecting.
    with client.websocket_connect("/agents/connect", headers=AGENT) as clone:
        clone.send_text(hello(identity=CLONE))
        refused = receive(clone)
    assert isinstance(refused, Refused)
    assert refused.reason == (
        "fake-host is online from 10.1.2.3 with another identity; start this agent with "
        "another --name (or, if that host is gone, strata hosts forget fake-host)"
    )

    forgotten = client.delete("/hosts/fake-host", headers=ADMIN)
    assert forgotten.status_code == 200, forgotten.text
    with client.websocket_connect("/agents/connect", headers=AGENT) as clone:
        clone.send_text(hello(identity=CLONE, address="10.9.9.9"))
        assert isinstance(receive(clone), Welcome)
        (host,) = client.get("/hosts", headers=ADMIN).json()
    assert (host["name"], host["address"]) == ("fake-host", "10.9.9.9")


def test_an_agent_without_an_identity_is_refused(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello(identity=None))
        refused = receive(ws)
    assert isinstance(refused, Refused)
    assert refused.reason == "this agent presented no identity (Hello.identity)"
    assert client.get("/hosts", headers=ADMIN).json() == []


def test_a_clash_found_under_the_lock_refuses_the_hello_and_changes_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row is read again when the hello is applied: an agent that passed the first read
    (another joined between the read and its hello) is refused there, detached at once."""
    with client.websocket_connect("/agents/connect", headers=AGENT) as owner:
        owner.send_text(hello())
        assert isinstance(receive(owner), Welcome)

    async def no_clash(_self: object, _hello: Hello) -> None:
        return None

    monkeypatch.setattr(AgentReports, "stored_clash", no_clash)
    with client.websocket_connect("/agents/connect", headers=AGENT) as clone:
        clone.send_text(hello(identity=CLONE, address="10.9.9.9"))
        refused = receive(clone)
        with pytest.raises(WebSocketDisconnect) as closed:
            clone.receive_text()
    assert isinstance(refused, Refused) and closed.value.code == 1008
    assert refused.reason.startswith("fake-host is online from 10.1.2.3 with another identity")
    assert not client.app.state.hub.connected("fake-host")  # type: ignore[attr-defined]
    (host,) = client.get("/hosts", headers=ADMIN).json()
    assert host["address"] == "10.1.2.3"


def test_a_name_taken_at_attach_refuses_the_agent_and_leaves_no_task_behind(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the checks before the attach miss a connected agent of another identity, the
    attach's own check refuses the newcomer: it is told why, and nothing of it is left."""
    with client.websocket_connect("/agents/connect", headers=AGENT) as owner:
        owner.send_text(hello())
        assert isinstance(receive(owner), Welcome)

        async def no_clash(_self: object, _hello: Hello) -> None:
            return None

        hub = client.app.state.hub  # type: ignore[attr-defined]
        monkeypatch.setattr(AgentReports, "stored_clash", no_clash)
        monkeypatch.setattr(hub, "connection", lambda _name: None)  # the checks see no one
        with client.websocket_connect("/agents/connect", headers=AGENT) as clone:
            clone.send_text(hello(identity=CLONE, address="10.9.9.9"))
            refused = receive(clone)
            with pytest.raises(WebSocketDisconnect) as closed:
                clone.receive_text()
        assert isinstance(refused, Refused) and closed.value.code == 1008
        assert refused.reason == (
            "fake-host is already connected from testclient with another identity; "
            "start this agent with another --name"
        )

        async def writers() -> list[str]:
            return [
                task.get_name()
                for task in asyncio.all_tasks()
                if task.get_name().startswith("agent-writer-") and not task.done()
            ]

        assert client.portal is not None  # the app runs on it
        assert client.portal.call(writers) == ["agent-writer-fake-host"]  # the owner's only
        key = TaskKey(job_id=1, task="chief:0", attempt=0)  # none of its own: acked all the same
        owner.send_text(TaskLogs(key=key, first_line=0, lines=["on"]).model_dump_json())
        assert receive(owner) == LogsAck(key=key, next_line=1)  # the owner is undisturbed


def test_a_start_says_whether_it_was_warm_and_why_not(client: TestClient) -> None:
    spec = {**job_spec(), "warm_start": False}
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello())
        receive(ws)
        job = client.post("/jobs", json=spec, headers=ADMIN).json()
        start = receive(ws)
        assert isinstance(start, StartTask) and start.warm_start is False
        reason = "the job asks for cold starts (warm_start: false)"
        started = TaskStarted(key=start.key, pid=7, warm=False, cold_reason=reason)
        ws.send_text(started.model_dump_json())
        _wait(client, job["id"], "running")
    events = client.get(f"/jobs/{job['id']}/events", headers=ADMIN).json()
    running = [e for e in events if e["data"].get("to") == "running"]
    assert running[0]["message"] == f"chief:0 started cold ({reason}) on fake-host (pid 7)"
    assert (running[0]["data"]["warm"], running[0]["data"]["cold_reason"]) == (False, reason)
    # The default is left out of the start message, and a start that says nothing reads as before.
    assert "warm_start" not in start.model_copy(update={"warm_start": True}).model_dump()
    assert "warm" not in TaskStarted(key=start.key, pid=7).model_dump()


def test_a_heartbeat_that_lists_only_what_was_reported_started_is_not_compared(
    client: TestClient,
) -> None:
    controller: Controller = client.app.state.controller  # type: ignore[attr-defined]
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        # The hello's comparison knows the host runs nothing; the start report adds the task.
        _, start = run_a_job(client, ws)
        assert controller.view.running.of("fake-host") == frozenset({start.key})
        compared = controller.view.last_compared["fake-host"]
        ws.send_text(Heartbeat(running=[RunningTask(key=start.key, pid=7)]).model_dump_json())
        time.sleep(0.5)  # ten passes: one would have compared it, had it been asked to
        assert controller.view.last_compared["fake-host"] == compared
