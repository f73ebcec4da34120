"""HostHealthChecks: a fault in a host's report cordons it (no job is placed there until an
operator clears it), a cleared fault cordons again only once it changes, a lost GPU's jobs
are re-placed, and repeated infrastructure failures cordon the host too."""

from __future__ import annotations

import time

from sqlalchemy import select

from agents.protocol import HealthFault, HostHealth, TaskExit, TaskKey
from backend.audit.models import AuditEntry
from backend.hosts import cordons
from backend.hosts.models import Host
from backend.jobs.states import JobStatus
from backend.scheduling.health_notes import HealthNotes
from backend.scheduling.reconcilers.host_health import HostHealthChecks
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from backend.scheduling.task_events import infrastructure_cause
from tests.backend.scheduling.reconcilers.conftest import World

ECC = HealthFault(kind="ecc_uncorrected", device=1, detail="uncorrectable ECC errors (3)", count=3)


def report(*faults: HealthFault, warnings: tuple[HealthFault, ...] = ()) -> HostHealth:
    now = time.time()
    return HostHealth(faults=list(faults), warnings=list(warnings), checked_at=now, wall_time=now)


async def read_host(world: World, name: str) -> Host:
    async with world.sessions() as session:
        host = await session.scalar(select(Host).where(Host.name == name))
        assert host is not None
        return host


async def uncordon(world: World, name: str) -> None:
    async with world.sessions() as session:
        cordons.uncordon(await cordons.host_named(session=session, name=name))
        await session.commit()


def checks(world: World, notes: HealthNotes) -> HostHealthChecks:
    return HostHealthChecks(notes=notes, view=world.view, settings=world.settings)


async def test_a_fault_cordons_the_host_and_no_job_goes_there_until_it_is_cleared(
    world: World,
) -> None:
    await world.host("host-a", gpus=2)
    notes = HealthNotes()
    assert notes.report("host-a", report(ECC))
    assert not notes.report("host-a", report(ECC))  # the same findings: nothing to apply
    await world.run(checks(world, notes))

    host = await read_host(world, "host-a")
    assert host.cordon_reason == "GPU 1: uncorrectable ECC errors (3)"
    assert (host.cordon_cause, host.cordoned_at is not None) == ("fault", True)
    assert [f["kind"] for f in host.faults] == ["ecc_uncorrected"]
    async with world.sessions() as session:
        [entry] = await session.scalars(select(AuditEntry))
    assert (entry.actor, entry.action, entry.target) == ("strata", "host.cordon", "host host-a")
    assert entry.detail["faults"][0]["count"] == 3

    job_id = await world.job("mirrored", replicas={"chief": {"count": 1, "gpus": 1}})
    await world.run(PendingJobs(view=world.view, wake=lambda: None))
    assert (await world.load(job_id)).status is JobStatus.pending

    await uncordon(world, "host-a")
    world.view.capacity_changed()
    world.view.unplaced = None  # as the uncordon route has the queued jobs look again
    await world.run(PendingJobs(view=world.view, wake=lambda: None))
    assert (await world.load(job_id)).status is JobStatus.scheduled

    # The acknowledged fault, reported again, does not cordon; once its count grows, it does.
    notes.report("host-a", report())  # it cleared (a GPU reset)...
    await world.run(checks(world, notes))
    notes.report("host-a", report(ECC))  # ...and came back: a fresh fault
    await world.run(checks(world, notes))
    assert (await read_host(world, "host-a")).cordon_cause == "fault"
    await uncordon(world, "host-a")
    notes.report("host-a", report(ECC.model_copy(update={"detail": "again (3)"})))
    await world.run(checks(world, notes))
    assert (await read_host(world, "host-a")).cordoned_at is None
    grown = ECC.model_copy(update={"count": 5, "detail": "uncorrectable ECC errors (5)"})
    notes.report("host-a", report(grown))
    await world.run(checks(world, notes))
    assert (await read_host(world, "host-a")).cordon_reason == "GPU 1: uncorrectable ECC errors (5)"


async def test_warnings_are_stored_but_do_not_cordon(world: World) -> None:
    await world.host("host-a")
    notes = HealthNotes()
    hot = HealthFault(kind="throttled", device=0, detail="throttled: hardware thermal slowdown")
    notes.report("host-a", report(warnings=(hot,)))
    await world.run(checks(world, notes))
    host = await read_host(world, "host-a")
    assert host.cordoned_at is None and host.faults == []
    assert host.warnings[0]["kind"] == "throttled"


async def test_a_clock_far_from_the_servers_is_a_fault(world: World) -> None:
    await world.host("host-a")
    notes = HealthNotes(clock_limit=30.0)
    now = time.time()
    ahead = HostHealth(checked_at=now + 95, wall_time=now + 95)
    assert notes.report("host-a", ahead, received=now)
    await world.run(checks(world, notes))
    host = await read_host(world, "host-a")
    assert host.cordon_reason == "clock 95s ahead of the server's (at most 30s)"
    near = HealthNotes(clock_limit=30.0)
    near.report("host-a", HostHealth(checked_at=now + 5, wall_time=now + 5), received=now)
    assert next(iter(near.take_reports().values())).faults == []


async def test_a_lost_gpus_job_is_re_placed_and_the_hosts_other_jobs_go_on(world: World) -> None:
    await world.host("host-a", gpus=2)
    one_gpu = {"chief": {"count": 1, "gpus": 1}}
    first = await world.running("mirrored", replicas=one_gpu)
    second = await world.running("mirrored", replicas=one_gpu)
    on_gpu = {job.id: job.tasks[0].gpu_indices[0] for job in (first, second)}
    lost_job = next(job_id for job_id, gpu in on_gpu.items() if gpu == 1)
    kept_job = next(job_id for job_id, gpu in on_gpu.items() if gpu == 0)
    notes = HealthNotes()
    notes.report("host-a", report(HealthFault(kind="gpu_lost", device=1, detail="lost")))
    outbox = await world.run(checks(world, notes))

    lost = await world.load(lost_job)
    assert lost.status is JobStatus.pending
    assert lost.reason is not None and "GPU 1 of host-a was lost" in lost.reason
    assert [m.type for _, m in outbox.messages] == ["stop_task"]  # its task, not the other
    assert (await world.load(kept_job)).status is JobStatus.running
    assert (await read_host(world, "host-a")).cordon_reason == "GPU 1: lost"


async def test_repeated_infrastructure_failures_cordon_the_host(world: World) -> None:
    await world.host("host-a")
    await world.host("host-b")
    notes = HealthNotes()
    for attempt in range(3):
        notes.failed("host-a", {"job_id": 1, "task": "chief:0", "attempt": attempt})
    notes.failed("host-b", {"cause": "host lost"})
    await world.run(checks(world, notes))  # settings: 3 within 10 minutes
    host = await read_host(world, "host-a")
    assert (host.cordon_reason, host.cordon_cause) == (
        "3 infrastructure failures in 10 min",
        "failures",
    )
    assert (await read_host(world, "host-b")).cordoned_at is None
    async with world.sessions() as session:
        [entry] = await session.scalars(select(AuditEntry))
    assert [f["attempt"] for f in entry.detail["failures"]] == [0, 1, 2]


def test_old_failures_fall_out_of_the_window() -> None:
    notes = HealthNotes()
    notes.failed("host-a", {}, at=0.0)
    notes.failed("host-a", {}, at=500.0)
    notes.failed("host-a", {}, at=700.0)
    assert notes.tripped(3, 10.0, now=700.0) == {}  # the first is 11 minutes old
    notes.failed("host-a", {}, at=710.0)
    assert len(notes.tripped(3, 10.0, now=710.0)["host-a"]) == 3
    assert notes.tripped(1, 0.0, now=710.0) == {}  # 0 minutes: never


def test_what_counts_as_an_infrastructure_failure() -> None:
    key = TaskKey(job_id=1, task="worker:0", attempt=0)

    def cause(**fields: object) -> str | None:
        return infrastructure_cause(TaskExit.model_validate({"key": key, **fields}), False)

    assert cause(exit_code=-9, signal=9) == "killed by SIGKILL"
    assert cause(exit_code=-7, signal=7) == "killed by SIGBUS"
    assert cause(exit_code=137) == "killed by SIGKILL"  # a container's
    assert cause(exit_code=1) is None  # the program's own failure
    assert cause(exit_code=-11, signal=11) is None  # SIGSEGV: most often the program
    assert cause(exit_code=-9, signal=9, over_memory_limit=1 << 30) is None  # its own limit
    assert cause(exit_code=-9, signal=9, agent_stopping=True) is None
    assert cause(exit_code=None, error="no such file") is None
    assert infrastructure_cause(TaskExit(key=key, exit_code=None), True) == (
        "vanished with its agent"
    )
