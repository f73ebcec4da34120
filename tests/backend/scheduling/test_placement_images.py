"""Placement of jobs that run in an image: only hosts with a container engine, and a reason
that names the hosts without one when none has."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.scheduling.placement import HostCapacity, TaskNeed, Unplaceable, listed, place

IMAGE = "tensorflow/tensorflow:2.21.0"
PS_JOB = [
    TaskNeed("chief", 0, 0),
    TaskNeed("worker", 0, 1),
    TaskNeed("worker", 1, 1),
    TaskNeed("ps", 0, 0),
]


def host(name: str, gpus: int = 2, *, engine: bool) -> HostCapacity:
    number = int(name.rsplit("-", 1)[1])
    return HostCapacity(
        host_id=number,
        name=name,
        address=f"10.0.{number // 250}.{number % 250}",
        free_gpus=list(range(gpus)),
        port_range=(100, 199),
        container_engine=engine,
    )


def test_an_image_job_lands_only_on_hosts_with_an_engine() -> None:
    hosts = [host("local-0", 8, engine=False), host("local-1", engine=True)]
    hosts += [host("local-2", engine=True), host("local-3", 8, engine=False)]
    slots = place(PS_JOB, hosts, image=IMAGE)
    assert not isinstance(slots, Unplaceable)
    assert {s.host_name for s in slots.values()} == {"local-1", "local-2"}
    # Capacity is taken from the hosts it landed on, and only from them.
    assert [len(h.free_gpus) for h in hosts] == [8, 1, 1, 8]


def test_a_job_without_an_image_goes_anywhere() -> None:
    hosts = [host("local-0", 8, engine=False), host("local-1", 0, engine=True)]
    slots = place([TaskNeed("worker", 0, 2)], hosts)
    assert not isinstance(slots, Unplaceable)
    assert slots[("worker", 0)].host_name == "local-0"


def test_no_host_with_an_engine_is_the_reason() -> None:
    assert place(PS_JOB, [host("local-0", engine=False)], image=IMAGE) == Unplaceable(
        f"no host can run image {IMAGE}: local-0 has no container engine"
    )
    two = [host("local-1", engine=False), host("local-0", engine=False)]
    assert place(PS_JOB, two, image=IMAGE) == Unplaceable(
        f"no host can run image {IMAGE}: local-0 and local-1 have no container engine"
    )


def test_the_named_hosts_are_capped_on_a_big_cluster() -> None:
    hosts = [host(f"local-{i}", engine=False) for i in range(1000)]
    assert place(PS_JOB, hosts, image=IMAGE) == Unplaceable(
        f"no host can run image {IMAGE}: local-0, local-1 and 998 more have no container engine"
    )


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["a"], "a"),
        (["b", "a"], "a and b"),
        (["c", "a", "b"], "a, b and c"),
        (["d", "c", "a", "b"], "a, b and 2 more"),
    ],
)
def test_hosts_are_listed_sorted_and_capped(names: list[str], text: str) -> None:
    assert listed(names) == text


def test_too_little_room_on_the_engine_hosts_says_the_image_limits_the_choice() -> None:
    hosts = [host("local-0", 8, engine=False), host("local-1", 1, engine=True)]
    reason = place([TaskNeed("worker", 0, 2)], hosts, image=IMAGE)
    assert isinstance(reason, Unplaceable)
    assert reason.reason == (
        "needs 2 GPUs on free hosts, cluster has 1 free, counting only the 1 of 2 online hosts"
        f" with a container engine (image {IMAGE} needs one)"
    )
    assert [len(h.free_gpus) for h in hosts] == [8, 1]  # nothing taken


def test_image_jobs_on_a_thousand_hosts_land_only_on_engine_hosts() -> None:
    # How fast placement is at this size is bench/scale.py's to measure, not a test's.
    hosts = [host(f"local-{i}", 8, engine=i % 2 == 0) for i in range(1000)]
    for _ in range(100):
        slots = place(PS_JOB, hosts, image=IMAGE)
        assert not isinstance(slots, Unplaceable)
        assert all(s.host_id % 2 == 0 for s in slots.values())


def test_hosts_that_have_the_image_are_preferred_when_they_can_take_the_job() -> None:
    pulled = [host(f"bare-{i}", 8, engine=True) for i in range(3)]
    have = [replace(host(f"has-{i}", 2, engine=True), images=frozenset({IMAGE})) for i in (10, 11)]
    slots = place(PS_JOB, [*pulled, *have], image=IMAGE)
    assert not isinstance(slots, Unplaceable)
    assert {s.host_name for s in slots.values()} == {"has-10", "has-11"}


def test_a_job_too_big_for_the_hosts_with_the_image_goes_where_it_fits() -> None:
    bare = host("bare-0", 8, engine=True)
    small = replace(host("has-1", 1, engine=True), images=frozenset({IMAGE}))
    slots = place(PS_JOB, [bare, small], image=IMAGE)
    assert not isinstance(slots, Unplaceable)
    assert "bare-0" in {s.host_name for s in slots.values()}


def test_an_untagged_image_is_its_latest_tag() -> None:
    bare = host("bare-0", 8, engine=True)
    latest = replace(host("has-1", 8, engine=True), images=frozenset({"team/tf:latest"}))
    slots = place(PS_JOB, [bare, latest], image="team/tf")
    assert not isinstance(slots, Unplaceable)
    assert {s.host_name for s in slots.values()} == {"has-1"}
