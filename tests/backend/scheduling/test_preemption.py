"""Choosing the running jobs a pending job of higher priority interrupts: only lower
priority, the fewest GPUs and least work lost first, never more than placement needs."""

from __future__ import annotations

from backend.scheduling.placement import HostCapacity, TaskNeed
from backend.scheduling.preemption import Candidate, HeldPlace, plan_preemption


def host(host_id: int, free: list[int], used_ports: set[int] | None = None) -> HostCapacity:
    return HostCapacity(
        host_id=host_id,
        name=f"gpu-{host_id}",
        address=f"10.0.0.{host_id}",
        free_gpus=free,
        port_range=(2220, 2229),
        used_ports=set(used_ports or ()),
    )


def running(
    job_id: int, priority: int, *places: tuple[int, tuple[int, ...], int], **kw: bool
) -> Candidate:
    return Candidate(
        job_id=job_id,
        priority=priority,
        project_id=1,
        places=tuple(HeldPlace(h, gpus, port) for h, gpus, port in places),
        **kw,
    )


def workers(count: int, gpus: int = 1) -> list[TaskNeed]:
    return [TaskNeed("worker", i, gpus) for i in range(count)]


def test_the_job_with_the_fewest_gpus_that_makes_room_is_chosen_alone() -> None:
    hosts = [host(1, [], {2220, 2221}), host(2, [], {2220})]
    big = running(5, 0, (1, (0, 1), 2220), (1, (2, 3), 2221))
    small = running(6, 0, (2, (0,), 2220))
    chosen = plan_preemption(workers(1), hosts, [big, small], priority=10)
    assert chosen == [small]


def test_never_a_job_of_equal_or_higher_priority() -> None:
    hosts = [host(1, [], {2220})]
    equal = running(5, 10, (1, (0,), 2220))
    higher = running(6, 20, (1, (1,), 2221))
    assert plan_preemption(workers(1), hosts, [equal, higher], priority=10) is None


def test_more_than_one_when_one_is_not_enough_and_no_more_than_needed() -> None:
    hosts = [host(1, [], {2220, 2221, 2222})]
    a = running(5, 0, (1, (0,), 2220))
    b = running(6, 0, (1, (1,), 2221))
    c = running(7, 0, (1, (2, 3), 2222))
    chosen = plan_preemption(workers(2), hosts, [a, b, c], priority=1)
    assert chosen is not None and sorted(x.job_id for x in chosen) == [5, 6]
    # Four GPUs wanted: all three; the two small ones alone are not enough.
    assert sorted(
        x.job_id for x in plan_preemption(workers(4), hosts, [a, b, c], priority=1) or []
    ) == [5, 6, 7]


def test_a_job_that_would_lose_work_goes_after_one_that_would_not() -> None:
    hosts = [host(1, [], {2220, 2221})]
    mirrored = running(5, 0, (1, (0,), 2220), loses_work=True)
    ps = running(6, 0, (1, (1,), 2221))
    assert plan_preemption(workers(1), hosts, [mirrored, ps], priority=1) == [ps]


def test_none_when_even_all_of_them_make_too_little_room() -> None:
    hosts = [host(1, [0], {2220})]
    one = running(5, 0, (1, (1,), 2220))
    assert plan_preemption(workers(3), hosts, [one], priority=1) is None
