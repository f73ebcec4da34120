"""GET /metrics during a running job, driven by a scripted agent and a runtime over real
websockets: its figures, parsed by prometheus_client's own parser, match what the API says;
and the agents' usage samples reach the API reads and the job stream."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from agents.protocol import (
    Ack,
    Device,
    DeviceStats,
    Heartbeat,
    Hello,
    MetricBatch,
    MetricPoint,
    RunningTask,
    StartTask,
    TaskKey,
    TaskStarted,
    TaskStats,
    TaskWelcome,
    UsageReport,
    Welcome,
    server_message,
)
from backend.app import create_app
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.factories import make_spec
from tests.support.runtime_channel import reply, runtime

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}"}
GRAFANA = Path(__file__).resolve().parents[3] / "docs" / "grafana" / "strata.json"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(database_url, tmp_path / "data", reconcile_seconds=0.05)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def scrape(client: TestClient, headers: dict[str, str] = ADMIN) -> Samples:
    answer = client.get("/metrics", headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def hello() -> str:
    return Hello(
        name="gpu-host",
        identity="identity-of-the-gpu-host-agent",
        address="10.1.2.3",
        port_range=(50000, 50009),
        devices=[Device(index=i, name="A100", uuid=f"GPU-{i}", memory_mb=40960) for i in range(4)],
        version="test",
    ).model_dump_json()


def wait_for(client: TestClient, job_id: int, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}", headers=ADMIN).json()
        if job["status"] == status:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is {job.get('status')}, not {status}")


def start_all(ws: WebSocketTestSession, count: int) -> list[StartTask]:
    starts: list[StartTask] = []
    while len(starts) < count:
        message = server_message.validate_json(ws.receive_text())
        if isinstance(message, StartTask):
            starts.append(message)
            ws.send_text(TaskStarted(key=message.key, pid=1000 + len(starts)).model_dump_json())
    return starts


def usage(starts: list[StartTask], wall_time: float) -> UsageReport:
    return UsageReport(
        wall_time=wall_time,
        devices=[
            DeviceStats(
                index=i,
                utilization_percent=10.0 * (i + 1),
                memory_used_bytes=(i + 1) << 30,
                memory_total_bytes=40 << 30,
            )
            for i in range(4)
        ],
        tasks=[
            TaskStats(key=s.key, cpu_seconds=12.5, cpu_percent=150.0, rss_bytes=300 << 20)
            for s in starts
        ],
    )


def test_metrics_match_the_api_during_a_running_job(client: TestClient) -> None:
    spec = make_spec(
        replicas={"chief": {"count": 1}, "worker": {"count": 2, "gpus": 1}, "ps": {"count": 1}}
    )
    with client.websocket_connect("/agents/connect", headers=AGENT) as agent:
        agent.send_text(hello())
        assert isinstance(server_message.validate_json(agent.receive_text()), Welcome)
        job = client.post("/jobs", json=spec, headers=ADMIN).json()
        queued = client.post(
            "/jobs",
            json=make_spec(
                name="too-big",
                replicas={
                    "chief": {"count": 1, "gpus": 8},
                    "worker": {"count": 1},
                    "ps": {"count": 1},
                },
            ),
            headers=ADMIN,
        ).json()
        starts = start_all(agent, 4)
        running = [RunningTask(key=s.key, pid=1) for s in starts]
        agent.send_text(Heartbeat(running=running).model_dump_json())
        job = wait_for(client, job["id"], "running")
        with runtime(client, job["id"]) as ws:
            assert reply(ws) == TaskWelcome(next_seq=0)
            batch = [
                MetricPoint(seq=s, name="loss", step=s, value=1.0, wall_time=1e9) for s in range(7)
            ]
            ws.send_text(MetricBatch(points=batch).model_dump_json())
            assert reply(ws) == Ack(seq=6)
        samples = scrape(client)

        jobs = client.get("/jobs", headers=ADMIN).json()["items"]
        for status in ("pending", "running", "succeeded"):
            expected = sum(j["status"] == status for j in jobs)
            assert value(samples, "strata_jobs", status=status) == expected, status
        assert value(samples, "strata_jobs", status="pending") == 1  # the one that cannot fit
        tasks = [
            t for j in jobs for t in client.get(f"/jobs/{j['id']}", headers=ADMIN).json()["tasks"]
        ]
        for role in ("chief", "worker", "ps"):
            for status in ("running", "pending"):
                expected = sum(t["role"] == role and t["status"] == status for t in tasks)
                assert value(samples, "strata_tasks", status=status, role=role) == expected
        assert value(samples, "strata_tasks", status="running", role="worker") == 2
        cluster = client.get("/cluster", headers=ADMIN).json()
        assert value(samples, "strata_hosts", status="online") == cluster["totals"]["online_hosts"]
        assert value(samples, "strata_hosts", status="lost") == 0
        assert value(samples, "strata_gpus") == cluster["totals"]["gpus"] == 4
        allocated = cluster["totals"]["gpus"] - cluster["totals"]["free_gpus"]
        assert value(samples, "strata_gpus_allocated") == allocated == 2
        assert value(samples, "strata_metric_points_ingested_total") == 7
        assert value(samples, "strata_placement_latency_seconds_count") == 1  # placed once
        assert value(samples, "strata_reconcile_pass_seconds_count") >= 1
        for holder in ("pass", "request", "agent"):  # placed, submitted, an agent said hello
            assert value(samples, "strata_controller_lock_held_seconds_total", by=holder) > 0
        assert value(samples, "strata_stream_subscribers") == 0

        # A restart by request is counted under its cause once it is committed.
        assert client.post(f"/jobs/{job['id']}/tasks/worker:1/restart", headers=ADMIN).is_success
        assert value(scrape(client), "strata_restarts_total", cause="requested") == 1
        client.post(f"/jobs/{queued['id']}/cancel", headers=ADMIN)
        assert value(scrape(client), "strata_jobs", status="cancelled") == 1


def test_refused_websockets_are_counted_by_channel_and_reason(client: TestClient) -> None:
    for path in ("/stream", "/tasks/connect"):
        with client.websocket_connect(path) as ws, pytest.raises(WebSocketDisconnect):
            ws.receive_text()
    with client.websocket_connect("/stream", headers=ADMIN) as ws:
        ws.send_text("{}")  # not a subscribe frame
        with pytest.raises(WebSocketDisconnect):
            ws.receive_text()
    samples = scrape(client)
    refusals = "strata_websocket_refusals_total"
    assert value(samples, refusals, channel="stream", reason="unauthenticated") == 1
    assert value(samples, refusals, channel="task", reason="unauthenticated") == 1
    assert value(samples, refusals, channel="stream", reason="invalid_frame") == 1


def test_metrics_take_an_admin_or_viewer_token(client: TestClient) -> None:
    viewer = client.post("/tokens", json={"name": "prometheus", "kind": "viewer"}, headers=ADMIN)
    scrape(client, {"Authorization": f"Bearer {viewer.json()['token']}"})
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=AGENT).status_code == 403


def test_usage_reaches_the_api_and_the_job_stream(client: TestClient) -> None:
    spec = make_spec(
        replicas={"chief": {"count": 1}, "worker": {"count": 2, "gpus": 1}, "ps": {"count": 1}}
    )
    with client.websocket_connect("/agents/connect", headers=AGENT) as agent:
        agent.send_text(hello())
        server_message.validate_json(agent.receive_text())
        job = client.post("/jobs", json=spec, headers=ADMIN).json()
        starts = start_all(agent, 4)
        running = [RunningTask(key=s.key, pid=1) for s in starts]
        with client.websocket_connect(f"/jobs/{job['id']}/stream", headers=ADMIN) as stream:
            stream.send_text(json.dumps({"type": "subscribe", "cursor": None}))
            while json.loads(stream.receive_text())["type"] != "history_end":
                pass
            report = usage(starts, wall_time=1.8e9)
            agent.send_text(Heartbeat(running=running, usage=report).model_dump_json())
            frames: dict[str, dict[str, Any]] = {}
            while len(frames) < 4:
                frame = json.loads(stream.receive_text())
                if frame["type"] == "usage":
                    frames[frame["task"]] = frame
        worker = next(s for s in starts if s.key.task == "worker:0")
        (gpu,) = worker.gpus
        assert frames["worker:0"]["host"] == "gpu-host"
        assert frames["worker:0"]["wall_time"] == 1.8e9
        assert frames["worker:0"]["values"] == {
            "task/cpu_percent": 150.0,
            "task/cpu_seconds": 12.5,
            "task/rss_bytes": float(300 << 20),
            f"host/gpu{gpu}/utilization_percent": 10.0 * (gpu + 1),
            f"host/gpu{gpu}/memory_used_bytes": float((gpu + 1) << 30),
            f"host/gpu{gpu}/memory_total_bytes": float(40 << 30),
        }
        assert not [k for k in frames["chief:0"]["values"] if k.startswith("host/")]  # no GPU

        read = client.get(f"/jobs/{job['id']}", headers=ADMIN).json()
        stats = {t["name"]: t["stats"] for t in read["tasks"]}
        assert stats["worker:0"]["cpu_percent"] == 150.0
        assert stats["worker:0"]["rss_bytes"] == 300 << 20
        assert stats["worker:0"]["attempt"] == 0
        assert stats["worker:0"]["sampled_at"].startswith("2027-01-15T08:00:00")
        (host,) = client.get("/hosts", headers=ADMIN).json()
        assert [d["stats"]["utilization_percent"] for d in host["devices"]] == [10, 20, 30, 40]
        assert host["devices"][3]["stats"]["memory_used_bytes"] == 4 << 30
        (entry,) = client.get("/cluster", headers=ADMIN).json()["hosts"]
        assert {t["task"]: t["stats"]["cpu_seconds"] for t in entry["tasks"]} == dict.fromkeys(
            stats, 12.5
        )
        assert entry["devices"][0]["stats"]["utilization_percent"] == 10

        # A sample that no longer names a task drops its stats: they are never stale.
        later = usage([s for s in starts if s.key.task != "ps:0"], wall_time=1.8e9 + 5)
        agent.send_text(Heartbeat(running=running, usage=later).model_dump_json())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            read = client.get(f"/jobs/{job['id']}", headers=ADMIN).json()
            if next(t for t in read["tasks"] if t["name"] == "ps:0")["stats"] is None:
                break
            time.sleep(0.05)
        assert next(t for t in read["tasks"] if t["name"] == "ps:0")["stats"] is None
        assert next(t for t in read["tasks"] if t["name"] == "chief:0")["stats"] is not None


def test_a_restarted_task_shows_no_stats_of_its_old_attempt(client: TestClient) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as agent:
        agent.send_text(hello())
        server_message.validate_json(agent.receive_text())
        job = client.post("/jobs", json=make_spec("mirrored"), headers=ADMIN).json()
        (start,) = start_all(agent, 1)
        running = [RunningTask(key=start.key, pid=1)]
        agent.send_text(Heartbeat(running=running, usage=usage([start], 1.8e9)).model_dump_json())
        wait_for(client, job["id"], "running")
        assert client.post(f"/jobs/{job['id']}/tasks/chief:0/restart", headers=ADMIN).is_success
        read = client.get(f"/jobs/{job['id']}", headers=ADMIN).json()
        assert read["tasks"][0]["attempt"] == 1 and read["tasks"][0]["stats"] is None
        assert TaskKey(job_id=job["id"], task="chief:0", attempt=0) == start.key


def test_the_grafana_dashboard_uses_only_metrics_the_server_serves(client: TestClient) -> None:
    dashboard = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bstrata_\w+", expr)}
    text = client.get("/metrics", headers=ADMIN).text
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    served = {  # a labelled counter nothing has counted yet has no sample, but it is served
        family.name + suffix
        for family in text_string_to_metric_families(text)
        for suffix in suffixes[family.type]
    }
    assert used, exprs
    assert used <= served, used - served
