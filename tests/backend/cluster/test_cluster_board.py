"""The cluster view kept in memory (backend.cluster.board): after every kind of change it is what
reading everything afresh gives."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from agents.protocol import DeviceStats, TaskKey, TaskStats, UsageReport
from backend.cluster import board as board_module
from backend.cluster import service
from backend.cluster.board import ClusterBoard, HostPart
from backend.cluster.schemas import ClusterRead, ClusterTotals, DeviceUsage, HostUsage, TaskRef
from backend.cluster.usage import UsageBoard
from backend.config import Settings
from backend.hosts.models import Host
from backend.hosts.states import HostStatus
from backend.jobs.cluster_changes import ClusterChanges
from backend.jobs.models import Job, Task
from backend.jobs.spec import validate_spec
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.scheduling.cluster import ClusterView
from backend.scheduling.controller import Change, Controller
from backend.scheduling.pace import HeartbeatPace
from backend.scheduling.reconcilers.heartbeat_times import HeartbeatTimes
from backend.scheduling.transaction import Transaction
from tests.conftest import Api
from tests.support.factories import create_job, make_host, make_spec


async def _read_afresh(api: Api) -> ClusterRead:
    """The cluster view built the plain way, from ORM objects and the schema's models: what
    the board's encoding must equal."""
    usage: UsageBoard = api.app.state.usage  # type: ignore[attr-defined]
    async with api.session() as session:
        hosts = (await session.scalars(select(Host).options(selectinload(Host.devices)))).all()
        live = (
            await session.execute(
                select(Task, Job.name)
                .join(Task.job)
                .where(Task.host_id.is_not(None), Task.status.in_(LIVE_TASK_STATUSES))
                .order_by(Task.job_id, Task.role, Task.index)
            )
        ).all()
    views = []
    for host in sorted(hosts, key=lambda h: h.name):
        online = host.status is HostStatus.online
        refs = [
            TaskRef(
                job_id=task.job_id,
                job_name=job_name,
                task=task.name,
                status=task.status,
                port=task.port,
                gpus=task.gpu_indices,
                stats=usage.task(task.job_id, task.name),
            )
            for task, job_name in live
            if task.host_id == host.id
        ]
        holders = {gpu: ref for ref in refs for gpu in ref.gpus}
        devices = [
            DeviceUsage(
                **service.device_read(d).model_dump(exclude={"stats"}),
                stats=usage.device(host.name, d.index) if online else None,
                task=holders.get(d.index),
            )
            for d in sorted(host.devices, key=lambda d: d.index)
        ]
        views.append(
            HostUsage(
                name=host.name,
                address=host.address,
                status=host.status,
                heartbeat_age_seconds=service.host_read(host).heartbeat_age_seconds,
                engine=service.engine_read(host),
                devices=devices,
                tasks=refs,
            )
        )
    free = sum(
        1 for h in views if h.status is HostStatus.online for d in h.devices if d.task is None
    )
    totals = ClusterTotals(
        hosts=len(views),
        online_hosts=sum(h.status is HostStatus.online for h in views),
        gpus=sum(len(h.devices) for h in views),
        free_gpus=free,
        live_tasks=sum(len(h.tasks) for h in views),
    )
    return ClusterRead(hosts=views, totals=totals)


def _without_ages(body: str) -> tuple[OrderedDict[str, Any], list[float]]:
    """The view with its keys in order (OrderedDicts compare their order too), ages apart."""
    view = json.loads(body, object_pairs_hook=OrderedDict)
    return view, [host.pop("heartbeat_age_seconds") for host in view["hosts"]]


async def _same_as_read_afresh(api: Api) -> dict[str, Any]:
    """GET /cluster, checked against the view read afresh: the same bytes but for the ages."""
    served = (await api.http.get("/cluster")).text
    (got, got_ages), (want, want_ages) = (
        _without_ages(served),
        _without_ages((await _read_afresh(api)).model_dump_json()),
    )
    assert got == want
    assert all(abs(a - b) < 2 for a, b in zip(got_ages, want_ages, strict=True))
    view: dict[str, Any] = json.loads(served)
    return view


async def _tasks(api: Api, job_id: int) -> dict[str, Task]:
    async with api.session() as session:
        return {t.name: t for t in await session.scalars(select(Task).where(Task.job_id == job_id))}


async def _as_the_controller(api: Api, change: Change[None]) -> None:
    """Apply a change to jobs, tasks or hosts through the controller, as every change is: a
    write from outside, alongside its passes, could meet a job they had just changed (its
    version) and fail."""
    controller: Controller = api.app.state.controller  # type: ignore[attr-defined]
    await controller.apply(change)


async def _write_tasks(api: Api, job_id: int, **changes: dict[str, Any]) -> None:
    """Set fields of the job's tasks by name, in one transaction, as the controller would."""

    async def write(tx: Transaction) -> None:
        session = tx.session
        hosts = {h.name: h.id for h in await session.scalars(select(Host))}
        for task in await session.scalars(select(Task).where(Task.job_id == job_id)):
            for field, value in changes.get(task.name, {}).items():
                if field == "host":
                    task.host_id = None if value is None else hosts[value]
                else:
                    setattr(task, field, value)

    await _as_the_controller(api, write)


async def _hosts_and_a_job(api: Api, hosts: dict[str, int]) -> int:
    """Hosts by name with so many GPUs each, and a pending job; the job's id."""
    async with api.session() as session:
        for name, gpus in hosts.items():
            await make_host(session, name, gpus=gpus)
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        await session.commit()
        return job.id


async def test_the_view_follows_every_kind_of_change(api: Api) -> None:
    job_id = await _hosts_and_a_job(api, {"host-a": 2, "host-b": 2})
    await _same_as_read_afresh(api)  # the first read: everything

    # An agent says hello again with other devices, from another address.
    async with api.session() as session:
        await make_host(session, "host-a", gpus=1, address="10.0.0.9")
        await session.commit()
    view = await _same_as_read_afresh(api)
    assert [d["index"] for d in view["hosts"][0]["devices"]] == [0]

    # Placed, then one task moved from one host to the other, then one finished.
    await _write_tasks(
        api,
        job_id,
        **{
            "chief:0": {"host": "host-a", "port": 42000, "status": TaskStatus.running},
            "worker:0": {"host": "host-a", "port": 42001, "gpu_indices": [0]},
            "worker:1": {"host": "host-b", "port": 42000, "gpu_indices": [1]},
            "ps:0": {"host": "host-b", "port": 42001, "status": TaskStatus.running},
        },
    )
    await _write_tasks(
        api, job_id, **{n: {"status": TaskStatus.running} for n in ("worker:0", "worker:1")}
    )
    view = await _same_as_read_afresh(api)
    assert view["totals"]["live_tasks"] == 4
    await _write_tasks(api, job_id, **{"worker:0": {"host": "host-b", "gpu_indices": [0]}})
    view = await _same_as_read_afresh(api)
    assert [len(h["tasks"]) for h in view["hosts"]] == [1, 3]
    await _write_tasks(api, job_id, **{"ps:0": {"status": TaskStatus.succeeded}})
    view = await _same_as_read_afresh(api)
    assert view["totals"]["live_tasks"] == 3

    # Usage sampled by host-b's agent: its device and a task show the samples.
    usage: UsageBoard = api.app.state.usage  # type: ignore[attr-defined]
    attempt = (await _tasks(api, job_id))["worker:1"].attempt
    await usage.record(
        "host-b",
        UsageReport(
            wall_time=time.time(),
            devices=[DeviceStats(index=1, utilization_percent=87.5)],
            tasks=[
                TaskStats(
                    key=TaskKey(job_id=job_id, task="worker:1", attempt=attempt), cpu_percent=50
                )
            ],
        ),
    )
    view = await _same_as_read_afresh(api)
    host_b = view["hosts"][1]
    assert host_b["devices"][1]["stats"]["utilization_percent"] == 87.5
    assert [t["stats"] and t["stats"]["cpu_percent"] for t in host_b["tasks"]] == [None, 50]

    # Heartbeat times written by the controller (past the ORM): the ages follow.
    view_of_agents = ClusterView()
    view_of_agents.heard_from("host-a")
    view_of_agents.last_heard["host-a"] -= 30
    async with api.session() as session:
        settings = Settings(heartbeat_seconds=1.0)
        tx = Transaction(session=session, executors=None)  # type: ignore[arg-type]
        await HeartbeatTimes(
            view=view_of_agents, pace=HeartbeatPace.from_settings(settings)
        ).reconcile(tx)
        await session.commit()
    view = await _same_as_read_afresh(api)
    assert view["hosts"][0]["heartbeat_age_seconds"] >= 30

    # host-b lost; then its job is done, and host-a is forgotten (rows deleted past the ORM).
    async def lose_host_b(tx: Transaction) -> None:
        host_b_row = await tx.session.scalar(select(Host).where(Host.name == "host-b"))
        assert host_b_row is not None
        host_b_row.status = HostStatus.lost

    await _as_the_controller(api, lose_host_b)
    view = await _same_as_read_afresh(api)
    assert view["totals"] == {
        "hosts": 2,
        "online_hosts": 1,
        "gpus": 3,
        "free_gpus": 1,
        "live_tasks": 3,
    }
    finished = {n: {"status": TaskStatus.succeeded} for n in ("chief:0", "worker:0", "worker:1")}
    await _write_tasks(api, job_id, **finished)

    async def succeed(tx: Transaction) -> None:
        (await tx.session.get_one(Job, job_id)).status = JobStatus.succeeded

    await _as_the_controller(api, succeed)
    assert (await api.http.delete("/hosts/host-a")).status_code == 200
    view = await _same_as_read_afresh(api)
    assert [h["name"] for h in view["hosts"]] == ["host-b"]


async def test_a_change_committed_while_the_board_reads_a_host_is_applied_next_time(
    api: Api, monkeypatch: Any
) -> None:
    job_id = await _hosts_and_a_job(api, {"host-a": 1})
    await _same_as_read_afresh(api)
    scheduled = TaskStatus.scheduled
    await _write_tasks(
        api, job_id, **{"chief:0": {"host": "host-a", "port": 42000, "status": scheduled}}
    )
    async with api.session() as session:  # the host's own row: it is read again
        await make_host(session, "host-a", gpus=1, address="10.0.0.7")
        await session.commit()

    read_rows = service.cluster_rows
    committed_meanwhile: list[bool] = []

    async def rows_then_a_commit(**kwargs: Any) -> service.ClusterRows:
        rows = await read_rows(**kwargs)
        if not committed_meanwhile:  # a transaction commits after the board read its rows
            committed_meanwhile.append(True)
            worker = {"host": "host-a", "port": 42001, "status": scheduled}
            await _write_tasks(api, job_id, **{"worker:0": worker})
        return rows

    monkeypatch.setattr(service, "cluster_rows", rows_then_a_commit)
    first = (await api.http.get("/cluster")).json()
    assert committed_meanwhile
    assert first["hosts"][0]["address"] == "10.0.0.7"
    assert [t["task"] for t in first["hosts"][0]["tasks"]] == ["chief:0"]
    view = await _same_as_read_afresh(api)
    assert [t["task"] for t in view["hosts"][0]["tasks"]] == ["chief:0", "worker:0"]


async def test_what_a_rollback_undid_is_not_shown(quiet_api: Api) -> None:
    api = quiet_api  # tasks written past the controller: no pass may write their job meanwhile
    job_id = await _hosts_and_a_job(api, {"host-a": 2})
    await _same_as_read_afresh(api)
    tasks: dict[str, dict[str, Any]] = {
        "chief:0": {"host_id": 0, "port": 42000},
        "worker:0": {"host_id": 0, "port": 42001, "gpu_indices": [0]},
        "worker:1": {"host_id": 0, "port": 42002, "gpu_indices": [1]},
    }

    async def place(session: Any, name: str) -> None:
        host = await session.scalar(select(Host).where(Host.name == "host-a"))
        task = await session.scalar(
            select(Task).where(
                Task.job_id == job_id, Task.role == name[:-2], Task.index == int(name[-1])
            )
        )
        for key, value in {**tasks[name], "host_id": host.id}.items():
            setattr(task, key, value)
        task.status = TaskStatus.running
        await session.flush()

    async with api.session() as session:  # the board knows the job from here on
        await place(session, "chief:0")
        await session.commit()
    await _same_as_read_afresh(api)

    async with api.session() as session:  # flushed, then rolled back: nothing happened
        await place(session, "worker:0")
        await session.rollback()
        await session.execute(select(Host.id))  # the session goes on, and commits
        await session.commit()
    view = await _same_as_read_afresh(api)
    assert view["totals"]["live_tasks"] == 1

    async with api.session() as session:  # a savepoint undone inside a committed change
        try:
            async with session.begin_nested():
                await place(session, "worker:0")
                raise RuntimeError("undo the savepoint")
        except RuntimeError:
            pass
        await place(session, "worker:1")
        await session.commit()
    view = await _same_as_read_afresh(api)
    assert [t["task"] for t in view["hosts"][0]["tasks"]] == ["chief:0", "worker:1"]


def _encoded_hosts(monkeypatch: Any) -> list[str]:
    """From now on, the name of each host whose part is encoded, as it is."""
    encoded: list[str] = []
    encode = HostPart.encode

    def counted(part: HostPart, *args: Any) -> None:
        encoded.append(part.row.name)
        encode(part, *args)

    monkeypatch.setattr(HostPart, "encode", counted)
    return encoded


async def test_keeping_up_between_requests_leaves_a_request_nothing_to_encode(
    api: Api, monkeypatch: Any
) -> None:
    job_id = await _hosts_and_a_job(api, {"host-a": 2, "host-b": 2})
    board: ClusterBoard = api.app.state.cluster_board  # type: ignore[attr-defined]
    usage: UsageBoard = api.app.state.usage  # type: ignore[attr-defined]
    await board.keep_up(api.app.state.sessions, usage)  # type: ignore[attr-defined]
    await _same_as_read_afresh(api)  # the first read: the board keeps up from here on
    running = TaskStatus.running
    await _write_tasks(
        api,
        job_id,
        **{
            "chief:0": {"host": "host-a", "port": 42000, "status": running},
            "worker:0": {"host": "host-b", "port": 42000, "status": running, "gpu_indices": [1]},
        },
    )
    await board.keep_up(api.app.state.sessions, usage)  # type: ignore[attr-defined]

    encoded = _encoded_hosts(monkeypatch)
    view = await _same_as_read_afresh(api)
    assert encoded == []
    assert [[t["task"] for t in h["tasks"]] for h in view["hosts"]] == [["chief:0"], ["worker:0"]]


async def test_a_row_written_with_nothing_changed_is_not_read_again(
    api: Api, monkeypatch: Any
) -> None:
    async with api.session() as session:
        await make_host(session, "host-a", gpus=1)
        await session.commit()
    await _same_as_read_afresh(api)
    read_rows = service.cluster_rows
    reads: list[Any] = []

    async def counted(**kwargs: Any) -> service.ClusterRows:
        reads.append(kwargs.get("host_ids"))
        return await read_rows(**kwargs)

    monkeypatch.setattr(service, "cluster_rows", counted)
    async with api.session() as session:  # as each comparison of what a host runs did
        host = await session.scalar(select(Host).where(Host.name == "host-a"))
        assert host is not None
        host.status = HostStatus.online
        await session.commit()
    await _same_as_read_afresh(api)
    assert reads == []


async def test_nothing_piles_up_for_a_view_never_asked_for(api: Api) -> None:
    job_id = await _hosts_and_a_job(api, {"host-a": 1})
    await _write_tasks(
        api, job_id, **{"chief:0": {"host": "host-a", "port": 42000, "status": TaskStatus.running}}
    )
    board: ClusterBoard = api.app.state.cluster_board  # type: ignore[attr-defined]
    assert board._pending == ClusterChanges()  # the first read reads everything anyway
    view = await _same_as_read_afresh(api)
    assert view["totals"]["live_tasks"] == 1


async def test_keeping_up_waits_for_a_burst_of_writes_to_pass(api: Api, monkeypatch: Any) -> None:
    """More rows written between two keep-ups than BURST_ROWS: nothing is encoded (each host
    would change again a second later); the first quieter interval catches up with all."""
    monkeypatch.setattr(board_module, "BURST_ROWS", 1)
    job_id = await _hosts_and_a_job(api, {"host-a": 2, "host-b": 2})
    board: ClusterBoard = api.app.state.cluster_board  # type: ignore[attr-defined]
    usage: UsageBoard = api.app.state.usage  # type: ignore[attr-defined]
    await _same_as_read_afresh(api)  # the first read: the board keeps up from here on
    encoded = _encoded_hosts(monkeypatch)
    running = TaskStatus.running
    await _write_tasks(
        api,
        job_id,
        **{
            "chief:0": {"host": "host-a", "port": 42000, "status": running},
            "worker:0": {"host": "host-b", "port": 42000, "status": running, "gpu_indices": [1]},
        },
    )
    await board.keep_up(api.app.state.sessions, usage)  # type: ignore[attr-defined]
    assert encoded == []  # two rows written: a burst, at one row
    await board.keep_up(api.app.state.sessions, usage)  # type: ignore[attr-defined]
    assert sorted(encoded) == ["host-a", "host-b"]  # nothing written since: caught up
    view = await _same_as_read_afresh(api)
    assert [[t["task"] for t in h["tasks"]] for h in view["hosts"]] == [["chief:0"], ["worker:0"]]
