"""Hosts and the cluster view: devices, health, and which task holds which GPU."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select
from sqlalchemy.orm.exc import StaleDataError

from backend.hosts.models import Host
from backend.hosts.names import NameClash
from backend.hosts.states import HostStatus
from backend.jobs.models import Job, Task
from backend.jobs.spec import validate_spec
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.hub import AgentConnection, AgentHub
from tests.conftest import Api
from tests.support.factories import create_job, make_host, make_spec


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
        "stats": None,  # no agent has sampled it
    }
    assert cluster["totals"] == {
        "hosts": 3,
        "online_hosts": 2,
        "gpus": 5,
        "free_gpus": 2,
        "live_tasks": 3,
    }


# --- one name, one host ---------------------------------------------------------------------


async def test_an_online_hosts_name_is_held_by_its_identity(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a", identity="identity-of-the-first", address="10.0.0.5")
        await session.commit()
    async with api.session() as session:
        with pytest.raises(NameClash) as clash:
            await make_host(session, "host-a", identity="identity-of-a-clone", address="10.0.0.6")
    assert str(clash.value) == (
        "host-a is online from 10.0.0.5 with another identity; start this agent with another "
        "--name (or, if that host is gone, strata hosts forget host-a)"
    )
    async with api.session() as session:  # the same agent again: welcome, as ever
        await make_host(session, "host-a", identity="identity-of-the-first", address="10.0.0.7")
        await session.commit()
    (host,) = (await api.http.get("/hosts")).json()
    assert host["address"] == "10.0.0.7"


async def test_a_lost_hosts_name_is_free_for_another_identity(api: Api) -> None:
    async with api.session() as session:
        host = await make_host(session, "host-a", identity="identity-of-the-first")
        host.status = HostStatus.lost
        await session.commit()
    async with api.session() as session:
        joined = await make_host(session, "host-a", identity="identity-of-the-second")
        assert (joined.identity, joined.status) == ("identity-of-the-second", HostStatus.online)
        await session.commit()


async def test_forget_releases_a_hosts_name(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a", identity="identity-of-the-first", gpus=2)
        await make_host(session, "host-b")
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        await session.commit()
        job_id = job.id
    # The job ran on host-a and finished: its tasks stay, without a host.
    await _place(api, job_id, "host-a", TaskStatus.succeeded, JobStatus.succeeded)

    response = await api.http.delete("/hosts/host-a")
    assert response.status_code == 200, response.text
    assert (response.json()["name"], len(response.json()["devices"])) == ("host-a", 2)
    assert [h["name"] for h in (await api.http.get("/hosts")).json()] == ["host-b"]
    tasks = (await api.http.get(f"/jobs/{job_id}")).json()["tasks"]
    assert {t["host"] for t in tasks} == {None}
    async with api.session() as session:  # any identity may take the name now
        await make_host(session, "host-a", identity="identity-of-the-re-imaged")
        await session.commit()

    missing = await api.http.delete("/hosts/host-a-typo")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "host host-a-typo does not exist"


async def test_forget_is_refused_while_jobs_have_tasks_on_the_host(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a")
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        await session.commit()
        job_id = job.id
    await _place(api, job_id, "host-a", TaskStatus.running, JobStatus.running)

    response = await api.http.delete("/hosts/host-a")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"host-a still has tasks of unfinished jobs: {job_id} (digits-ps); cancel them, or "
        "wait until the host is lost and they are placed elsewhere"
    )
    assert [h["name"] for h in (await api.http.get("/hosts")).json()] == ["host-a"]


async def test_forget_is_refused_while_an_agent_is_connected(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a")
        await session.commit()
    hub: AgentHub = api.app.state.hub  # type: ignore[attr-defined]
    connection = AgentConnection(
        "host-a",
        SilentSocket(),  # type: ignore[arg-type]
        identity="identity-of-the-first",
        address="10.0.0.5",
    )
    hub.attach(connection)
    try:
        response = await api.http.delete("/hosts/host-a")
    finally:
        hub.detach(connection)
        await connection.close()
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "host-a is connected from 10.0.0.5: stop its agent first (forget releases the name of "
        "a host that is gone)"
    )


async def test_forget_needs_an_admin_token(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a")
        await session.commit()
    response = await api.http.delete("/hosts/host-a", headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401
    assert [h["name"] for h in (await api.http.get("/hosts")).json()] == ["host-a"]


class SilentSocket:
    async def send_text(self, _text: str) -> None:
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


async def _place(
    api: Api, job_id: int, host_name: str, task_status: TaskStatus, job_status: JobStatus
) -> None:
    """Put every task of the job on the host, as placement would have (not under test)."""
    for _ in range(5):  # a controller pass may write the job meanwhile (its reason)
        try:
            async with api.session() as session:
                host = await session.scalar(select(Host).where(Host.name == host_name))
                job = await session.get_one(Job, job_id)
                assert host is not None
                for port, task in enumerate(
                    await session.scalars(select(Task).where(Task.job_id == job_id))
                ):
                    task.host_id, task.port, task.status = host.id, 42000 + port, task_status
                job.status = job_status
                await session.commit()
            return
        except StaleDataError:
            continue
    raise AssertionError("the job kept changing")


async def test_a_drained_host_says_so_with_what_is_left_and_takes_no_new_task(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a", gpus=2)
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        await session.commit()
        job_id = job.id
    await _place(api, job_id, "host-a", TaskStatus.running, JobStatus.running)
    missing = await api.http.post("/hosts/nowhere/drain")
    assert (missing.status_code, missing.json()["detail"]) == (404, "host nowhere does not exist")

    drained = await api.http.post("/hosts/host-a/drain", params={"deadline_seconds": 5})
    assert drained.status_code == 200, drained.text
    assert drained.json()["draining_since"] is not None
    assert drained.json()["live_tasks"] == 4  # its job is being moved off (no runtime here)
    listed = (await api.http.get("/hosts")).json()
    assert (listed[0]["draining_since"], listed[0]["live_tasks"]) == (
        drained.json()["draining_since"],
        4,
    )
    back = await api.http.delete("/hosts/host-a/drain")
    assert back.status_code == 200 and back.json()["draining_since"] is None
    audit = (await api.http.get("/audit", params={"action": "host.drain"})).json()["items"]
    assert [entry["target"] for entry in audit] == ["host host-a"]


async def test_draining_needs_an_admin_token(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "host-a")
        await session.commit()
    refused = await api.http.post("/hosts/host-a/drain", headers={"Authorization": "Bearer no"})
    assert refused.status_code == 401
    assert (await api.http.get("/hosts")).json()[0]["draining_since"] is None


async def test_a_notice_for_a_host_moves_its_jobs_off_as_its_agent_leaving_would(
    api: Api,
) -> None:
    async with api.session() as session:
        await make_host(session, "host-a", gpus=2)
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        await session.commit()
        job_id = job.id
    await _place(api, job_id, "host-a", TaskStatus.running, JobStatus.running)
    missing = await api.http.post("/hosts/nowhere/notice", params={"seconds": 30})
    assert (missing.status_code, missing.json()["detail"]) == (404, "host nowhere does not exist")
    for params in ({}, {"seconds": 0}, {"seconds": 7200}):
        bad = await api.http.post("/hosts/host-a/notice", params=params)
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "seconds", bad.text

    reason = "spot instance reclaimed in 2 minutes"
    noticed = await api.http.post("/hosts/host-a/notice", params={"seconds": 30, "reason": reason})
    assert noticed.status_code == 200, noticed.text
    assert noticed.json()["name"] == "host-a"
    # No runtime is connected here: the job moves at once, to resume from its last backup.
    for _ in range(100):
        moved = (await api.http.get(f"/jobs/{job_id}")).json()
        if moved["status"] == "pending":
            break
        await asyncio.sleep(0.05)
    assert (moved["restart_count"], moved["failure_count"]) == (0, 0)
    events = (await api.http.get(f"/jobs/{job_id}/events")).json()
    (event,) = [e for e in events if e["data"].get("interruption") == "notice"]
    assert event["message"].startswith(f"host-a is leaving ({reason}); resumes from no checkpoint")
    audit = (await api.http.get("/audit", params={"action": "host.notice"})).json()["items"]
    assert [(entry["target"], entry["detail"]) for entry in audit] == [
        ("host host-a", {"seconds": 30.0, "reason": reason})
    ]
