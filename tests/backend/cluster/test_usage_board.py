"""The usage board alone: what it shows of a host's last sample, and when it stops showing it."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.protocol import DeviceStats, TaskKey, TaskStats, UsageReport
from backend.cluster.usage import UsageBoard
from backend.hosts.schemas import DeviceRead, HostRead
from backend.hosts.states import HostStatus
from backend.streams.broker import Broker

KEY = TaskKey(job_id=4, task="worker:0", attempt=2)


def board() -> UsageBoard:
    # No subscriber: the board never needs the database.
    return UsageBoard(Broker(), async_sessionmaker[AsyncSession]())


def report(wall_time: float, *tasks: TaskStats) -> UsageReport:
    return UsageReport(
        wall_time=wall_time,
        devices=[DeviceStats(index=0, utilization_percent=55.0, memory_used_bytes=1 << 30)],
        tasks=list(tasks),
    )


def host(status: HostStatus) -> HostRead:
    now = datetime.now(UTC)
    return HostRead(
        name="h1",
        address="10.0.0.1",
        status=status,
        port_range=(1, 2),
        agent_version="test",
        engine=None,
        devices=[
            DeviceRead(index=0, kind="gpu", name="A100", uuid=None, memory_mb=None, simulated=False)
        ],
        registered_at=now,
        last_heartbeat_at=now,
        heartbeat_age_seconds=0.0,
    )


async def test_a_task_sample_is_shown_for_its_attempt_until_the_host_stops_naming_it() -> None:
    usage = board()
    await usage.record("h1", report(1.8e9, TaskStats(key=KEY, cpu_percent=80.0, rss_bytes=7)))
    shown = usage.task(4, "worker:0", attempt=2)
    assert shown is not None and (shown.cpu_percent, shown.rss_bytes) == (80.0, 7)
    assert shown.sampled_at == datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    assert usage.task(4, "worker:0", attempt=3) is None  # a later attempt has its own samples
    await usage.record("h1", report(1.8e9 + 5))
    assert usage.task(4, "worker:0") is None


async def test_a_lost_host_shows_no_device_stats_and_a_forgotten_one_nothing() -> None:
    usage = board()
    await usage.record("h1", report(1.8e9, TaskStats(key=KEY)))
    (online,) = usage.annotate_hosts([host(HostStatus.online)])
    assert online.devices[0].stats is not None
    assert online.devices[0].stats.utilization_percent == 55.0
    (lost,) = usage.annotate_hosts([host(HostStatus.lost)])
    assert lost.devices[0].stats is None
    usage.forget("h1")
    assert usage.device("h1", 0) is None and usage.task(4, "worker:0") is None
