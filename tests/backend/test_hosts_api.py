"""Hosts and the cluster view: devices, health, and which task holds which GPU."""

from __future__ import annotations

from backend.jobs.models import Task
from backend.jobs.service import create_job
from backend.jobs.spec import validate_spec
from backend.jobs.states import HostStatus, TaskStatus
from tests.conftest import Api
from tests.support.factories import make_host, make_spec


async def test_hosts_lists_devices_and_heartbeat_age(api: Api) -> None:
    assert (await api.http.get("/hosts")).json() == []
    async with api.session() as session:
        await make_host(session, "host-b", gpus=1)
        await make_host(session, "host-a", gpus=2, port_range=(43000, 43010))
        await session.commit()
    hosts = (await api.http.get("/hosts")).json()
    assert [h["name"] for h in hosts] == ["host-a", "host-b"]
    assert hosts[0]["port_range"] == [43000, 43010]
    assert [d["index"] for d in hosts[0]["devices"]] == [0, 1]
    assert hosts[0]["devices"][0]["simulated"] is True
    assert hosts[0]["status"] == "online"
    assert 0 <= hosts[0]["heartbeat_age_seconds"] < 60


async def test_reregistering_a_host_replaces_its_devices(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a", gpus=4)
        await session.commit()
    async with api.session() as session:
        await make_host(session, "host-a", gpus=1, address="10.0.0.9")
        await session.commit()
    (host,) = (await api.http.get("/hosts")).json()
    assert host["address"] == "10.0.0.9"
    assert len(host["devices"]) == 1


async def test_cluster_shows_which_task_holds_which_gpu(api: Api) -> None:
    async with api.session() as session:
        host_a = await make_host(session, "host-a", gpus=2)
        host_b = await make_host(session, "host-b", gpus=2)
        lost = await make_host(session, "host-c", gpus=1)
        lost.status = HostStatus.lost
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        tasks: dict[str, Task] = {t.name: t for t in job.tasks}
        placement = {
            "chief:0": (host_a, 42000, []),
            "worker:0": (host_a, 42001, [1]),
            "worker:1": (host_b, 42000, [0]),
            "ps:0": (host_b, 42001, []),
        }
        for name, (host, port, gpus) in placement.items():
            tasks[name].host_id, tasks[name].port = host.id, port
            tasks[name].gpu_indices = gpus
            tasks[name].status = TaskStatus.running
        tasks["ps:0"].status = TaskStatus.succeeded  # finished tasks hold nothing
        await session.commit()
        job_id = job.id

    cluster = (await api.http.get("/cluster")).json()
    by_name = {h["name"]: h for h in cluster["hosts"]}
    holders_a = [d["task"] and d["task"]["task"] for d in by_name["host-a"]["devices"]]
    holders_b = [d["task"] and d["task"]["task"] for d in by_name["host-b"]["devices"]]
    assert holders_a == [None, "worker:0"]
    assert holders_b == ["worker:1", None]
    assert [t["task"] for t in by_name["host-a"]["tasks"]] == ["chief:0", "worker:0"]
    assert [t["task"] for t in by_name["host-b"]["tasks"]] == ["worker:1"]
    assert by_name["host-a"]["tasks"][1] == {
        "job_id": job_id,
        "job_name": "digits-ps",
        "task": "worker:0",
        "status": "running",
        "port": 42001,
        "gpus": [1],
    }
    assert cluster["totals"] == {
        "hosts": 3,
        "online_hosts": 2,
        "gpus": 5,
        "free_gpus": 2,
        "live_tasks": 3,
    }
