"""Gang placement: all or nothing, GPU-aware, one port per live task, spread across hosts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from backend.scheduling.placement import (
    HostCapacity,
    Ranking,
    Slot,
    TaskNeed,
    Unplaceable,
    _place_on,
    place,
)


def host(
    host_id: int, gpus: int, ports: tuple[int, int] = (100, 199), used: set[int] | None = None
) -> HostCapacity:
    return HostCapacity(
        host_id=host_id,
        name=f"h{host_id}",
        address=f"10.0.0.{host_id}",
        free_gpus=list(range(gpus)),
        port_range=ports,
        used_ports=used or set(),
    )


PS_JOB = [
    TaskNeed("chief", 0, 0),
    TaskNeed("worker", 0, 1),
    TaskNeed("worker", 1, 1),
    TaskNeed("ps", 0, 0),
]


def test_ps_job_spreads_over_two_hosts_with_distinct_gpus_and_ports() -> None:
    hosts = [host(1, 2), host(2, 2)]
    slots = place(PS_JOB, hosts)
    assert not isinstance(slots, Unplaceable)
    workers = [slots[("worker", 0)], slots[("worker", 1)]]
    assert {w.host_id for w in workers} == {1, 2}  # one GPU task per host
    assert {s.host_id for s in slots.values()} == {1, 2}
    for host_id in (1, 2):
        ports = [s.port for s in slots.values() if s.host_id == host_id]
        assert len(ports) == len(set(ports)) == 2
    # capacity is consumed: each host has one GPU and two ports fewer
    assert [len(h.free_gpus) for h in hosts] == [1, 1]
    assert [len(h.used_ports) for h in hosts] == [2, 2]


def test_gpus_are_specific_device_indices() -> None:
    hosts = [host(1, 4)]
    slots = place([TaskNeed("worker", 0, 2), TaskNeed("worker", 1, 2)], hosts)
    assert not isinstance(slots, Unplaceable)
    assert sorted(slots[("worker", 0)].gpus + slots[("worker", 1)].gpus) == [0, 1, 2, 3]
    assert hosts[0].free_gpus == []


def test_used_ports_are_skipped() -> None:
    slots = place([TaskNeed("chief", 0, 0)], [host(1, 0, ports=(100, 102), used={100, 101})])
    assert slots == {("chief", 0): Slot(1, "h1", "10.0.0.1", 102, ())}


def test_all_or_nothing_leaves_capacity_untouched() -> None:
    hosts = [host(1, 2), host(2, 1)]
    result = place([TaskNeed("worker", i, 1) for i in range(4)], hosts)
    assert result == Unplaceable("needs 4 GPUs on free hosts, cluster has 3 free")
    assert [h.free_gpus for h in hosts] == [[0, 1], [0]]
    assert [h.used_ports for h in hosts] == [set(), set()]


def test_a_task_too_big_for_any_one_host() -> None:
    result = place([TaskNeed("chief", 0, 3)], [host(1, 2), host(2, 2)])
    assert result == Unplaceable("chief:0 needs 3 GPUs on one host; the most free on any host is 2")


def test_no_hosts_and_no_ports() -> None:
    assert place(PS_JOB, []) == Unplaceable("no online hosts; waiting for an agent to join")
    full = host(1, 2, ports=(100, 101), used={100, 101})
    assert place(PS_JOB, [full]) == Unplaceable("no free ports left in any host's port range")


def test_zero_gpu_job_on_gpu_less_hosts() -> None:
    slots = place(PS_JOB[:1] + PS_JOB[3:], [host(1, 0), host(2, 0)])
    assert not isinstance(slots, Unplaceable)
    assert {s.host_id for s in slots.values()} == {1, 2}


@settings(max_examples=200, deadline=None)
@given(
    free=st.lists(st.integers(0, 4), min_size=1, max_size=12),
    port_counts=st.lists(st.integers(1, 3), min_size=12, max_size=12),
    gpus_needed=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    jobs=st.integers(1, 4),
)
def test_looking_only_at_the_shortlist_places_as_looking_at_every_host(
    free: list[int], port_counts: list[int], gpus_needed: list[int], jobs: int
) -> None:
    """place() considers only the hosts with the most free GPUs; with busy ports and jobs
    placed one after another, it must choose exactly what the rule over every host chooses."""

    def cluster() -> list[HostCapacity]:
        return [
            host(i + 1, gpus, ports=(100, 100 + port_counts[i] - 1), used={100} if i % 3 else None)
            for i, gpus in enumerate(free)
        ]

    needs = [TaskNeed("worker", i, g) for i, g in enumerate(gpus_needed)]
    shortlisted, everywhere = cluster(), cluster()
    for _ in range(jobs):
        expected = _place_on(needs, everywhere)
        assert place(needs, shortlisted) == expected
        assert [(h.free_gpus, h.used_ports) for h in shortlisted] == [
            (h.free_gpus, h.used_ports) for h in everywhere
        ]


@settings(max_examples=200, deadline=None)
@given(
    free=st.lists(st.integers(0, 4), min_size=1, max_size=12),
    port_counts=st.lists(st.integers(1, 3), min_size=12, max_size=12),
    jobs=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1, max_size=6),
)
def test_a_ranking_kept_across_jobs_places_as_ranking_afresh_for_each(
    free: list[int], port_counts: list[int], jobs: list[list[int]]
) -> None:
    """A pass ranks its hosts once and place() keeps the ranking up to date: job after job
    (placed or not), the same slots as without one, and the same free GPUs in total."""

    def cluster() -> list[HostCapacity]:
        return [
            host(i + 1, gpus, ports=(100, 100 + port_counts[i] - 1), used={100} if i % 2 else None)
            for i, gpus in enumerate(free)
        ]

    ranked, afresh = cluster(), cluster()
    ranking = Ranking(ranked)
    for gpus_needed in jobs:
        needs = [TaskNeed("worker", i, g) for i, g in enumerate(gpus_needed)]
        assert place(needs, ranked, ranking=ranking) == place(needs, afresh)
        assert ranking.free_gpus == sum(len(h.free_gpus) for h in afresh)
        assert [(h.free_gpus, h.used_ports) for h in ranked] == [
            (h.free_gpus, h.used_ports) for h in afresh
        ]


def test_a_ranking_leaves_out_hosts_without_a_free_port() -> None:
    full = host(1, 4, ports=(100, 100), used={100})
    ranking = Ranking([full, host(2, 1), host(3, 2), host(4, 2)])
    assert [h.host_id for h in ranking.preferred()] == [3, 4, 2]


def test_more_gpus_than_are_free_anywhere_is_refused_saying_so_with_nothing_taken() -> None:
    hosts = [
        HostCapacity(i, f"h{i}", "10.0.0.1", [0] if i == 0 else [], (1, 100)) for i in range(3)
    ]
    placed = place([TaskNeed("worker", 0, 1), TaskNeed("worker", 1, 1)], hosts)
    assert placed == Unplaceable("needs 2 GPUs on free hosts, cluster has 1 free")
    assert hosts[0].free_gpus == [0]  # nothing taken
