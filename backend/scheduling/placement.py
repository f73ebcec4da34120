"""Gang placement: every task of a job gets a host, a port and its GPUs, or none does.

Pure functions over snapshots of capacity, so that the rules are easy to test and to read.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from agents.vocabulary import format_task_name


@dataclass(frozen=True)
class TaskNeed:
    role: str
    index: int
    gpus: int

    @property
    def name(self) -> str:
        return format_task_name(self.role, self.index)


@dataclass
class HostCapacity:
    """What a host has free right now. Mutated as tasks are placed on it."""

    host_id: int
    name: str
    address: str
    free_gpus: list[int]  # device indices, ascending
    port_range: tuple[int, int]  # inclusive
    used_ports: set[int] = field(default_factory=set)
    container_engine: bool = False  # its agent can run tasks in an image (environment.image)
    images: frozenset[str] = frozenset()  # the tagged images its engine has (name:tag)

    def next_port(self) -> int | None:
        return lowest_free_port(self.port_range, self.used_ports)

    def has_free_port(self) -> bool:
        low, high = self.port_range
        return high - low + 1 > len(self.used_ports)


class Ranking:
    """Hosts in the order placement prefers them (most free GPUs, then name), with their free
    GPUs totalled, kept across the jobs of a pass: the same answers as sorting and summing
    every host again for every job, without the repeated work."""

    def __init__(self, hosts: Iterable[HostCapacity]) -> None:
        self._hosts = {host.host_id: host for host in hosts}
        self._free: dict[int, int] = {}  # host id -> free GPUs when last ranked
        self._by_free: dict[int, list[tuple[str, int, HostCapacity]]] = {}  # each by name
        for host in self._hosts.values():
            self._add(host)
        self.free_gpus = sum(self._free.values())

    def _add(self, host: HostCapacity) -> None:
        free = self._free[host.host_id] = len(host.free_gpus)
        bisect.insort(self._by_free.setdefault(free, []), (host.name, host.host_id, host))

    def preferred(self) -> Iterator[HostCapacity]:
        """Every host with a free port, the most free GPUs first, then by name."""
        for free in sorted(self._by_free, reverse=True):
            for _, _, host in self._by_free[free]:
                if host.has_free_port():
                    yield host

    def took(self, host_ids: Iterable[int]) -> None:
        """These hosts' capacity changed (a job was placed on them): rank them again."""
        for host_id in host_ids:
            host = self._hosts.get(host_id)
            if host is None:
                continue  # not one of the ranked hosts
            was = self._free[host_id]
            bucket = self._by_free[was]
            del bucket[bisect.bisect_left(bucket, (host.name, host.host_id, host))]
            self.free_gpus -= was
            self._add(host)
            self.free_gpus += self._free[host.host_id]


@dataclass(frozen=True)
class Slot:
    host_id: int
    host_name: str
    address: str
    port: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Unplaceable:
    reason: str


def place(
    needs: Sequence[TaskNeed],
    hosts: Sequence[HostCapacity],
    *,
    image: str | None = None,
    ranking: Ranking | None = None,
) -> dict[tuple[str, int], Slot] | Unplaceable:
    """Place all tasks or none. On success the hosts' capacity is reduced accordingly.

    Tasks that need the most GPUs go first (they are the hardest to fit); each goes to the
    host with the fewest tasks of this job so far, then the most free GPUs, so that a job
    spreads across hosts instead of piling onto one. A job that runs in an image goes only
    to hosts with a container engine (any engine: an image it lacks is pulled), and to hosts
    that already have the image when they can take the whole job, so that nothing is pulled.

    `ranking`, of these same hosts, is kept up to date here when the job is placed: a pass
    placing many jobs on the same hosts ranks them once.
    """
    placed = _place_with_image(needs, hosts, image, ranking)
    if ranking is not None and not isinstance(placed, Unplaceable):
        ranking.took({slot.host_id for slot in placed.values()})
    return placed


def _place_with_image(
    needs: Sequence[TaskNeed],
    hosts: Sequence[HostCapacity],
    image: str | None,
    ranking: Ranking | None,
) -> dict[tuple[str, int], Slot] | Unplaceable:
    if not hosts:
        return Unplaceable("no online hosts; waiting for an agent to join")
    if image is None:
        return _place(needs, hosts, ranking)
    able = [h for h in hosts if h.container_engine]
    if not able:
        names = listed(h.name for h in hosts)
        verb = "has" if len(hosts) == 1 else "have"
        return Unplaceable(f"no host can run image {image}: {names} {verb} no container engine")
    tagged = image if _has_tag(image) else f"{image}:latest"
    having = [h for h in able if tagged in h.images]
    if having and len(having) < len(able):
        placed = _place(needs, having)
        if not isinstance(placed, Unplaceable):
            return placed
    placed = _place(needs, able)
    if isinstance(placed, Unplaceable) and len(able) < len(hosts):
        return Unplaceable(
            f"{placed.reason}, counting only the {len(able)} of {len(hosts)} online hosts with"
            f" a container engine (image {image} needs one)"
        )
    return placed


def _has_tag(image: str) -> bool:
    """Whether the reference names a tag or digest (the engine reads a bare name as :latest)."""
    return "@" in image or ":" in image.rsplit("/", 1)[-1]


def listed(names: Iterable[str], most: int = 3) -> str:
    """'a', 'a and b', 'a, b and c', or 'a, b and 998 more' past `most` names, sorted."""
    ordered = sorted(names)
    if len(ordered) > most:
        ordered = [*ordered[: most - 1], f"{len(ordered) - most + 1} more"]
    if len(ordered) == 1:
        return ordered[0]
    return f"{', '.join(ordered[:-1])} and {ordered[-1]}"


def _place(
    needs: Sequence[TaskNeed], hosts: Sequence[HostCapacity], ranking: Ranking | None = None
) -> dict[tuple[str, int], Slot] | Unplaceable:
    # More GPUs than all of them have free: refused before any host is tried (with a full
    # cluster, trying a thousand hosts for each waiting job made every fifth second's pass,
    # which examines them all again, hold the lock for a submission's p99).
    wanted = sum(n.gpus for n in needs)
    free = ranking.free_gpus if ranking is not None else sum(len(h.free_gpus) for h in hosts)
    if wanted > free:
        return Unplaceable(_too_few_gpus(wanted, free))
    # The hosts the rule can choose: each task goes to a host with none of this job's tasks
    # yet while there is one, and of those to the one with the most free GPUs. So among
    # hosts with a free port, the len(needs) with the most free GPUs always hold the choice,
    # and the rest of a thousand hosts need not be looked at (nor copied) for every job.
    if ranking is not None:
        shortlist = list(itertools.islice(ranking.preferred(), len(needs)))
    else:
        shortlist = heapq.nsmallest(
            len(needs),
            (h for h in hosts if h.has_free_port()),
            key=lambda h: (-len(h.free_gpus), h.name),
        )
    placed = _place_on(needs, shortlist) if shortlist else None
    return placed if isinstance(placed, dict) else _place_on(needs, hosts)


def _place_on(
    needs: Sequence[TaskNeed], hosts: Sequence[HostCapacity]
) -> dict[tuple[str, int], Slot] | Unplaceable:
    trial = {h.host_id: (list(h.free_gpus), set(h.used_ports)) for h in hosts}
    by_id = {h.host_id: h for h in hosts}
    on_host: Counter[int] = Counter()
    slots: dict[tuple[str, int], Slot] = {}
    for need in sorted(needs, key=lambda n: -n.gpus):
        # Ranked on GPUs alone, a port checked only for the host chosen: checking every
        # host's ports for every task grows with the cluster.
        candidates = [h for h in hosts if len(trial[h.host_id][0]) >= need.gpus]
        while candidates:
            host = min(
                candidates, key=lambda h: (on_host[h.host_id], -len(trial[h.host_id][0]), h.name)
            )
            if (port := _free_port(host, trial)) is not None:
                break
            candidates.remove(host)
        else:
            return Unplaceable(_why_not(needs, hosts, need))
        gpus, ports = trial[host.host_id]
        taken, trial[host.host_id] = gpus[: need.gpus], (gpus[need.gpus :], ports)
        ports.add(port)
        on_host[host.host_id] += 1
        slots[(need.role, need.index)] = Slot(
            host.host_id, host.name, host.address, port, tuple(taken)
        )
    for host_id, (gpus, ports) in trial.items():
        by_id[host_id].free_gpus, by_id[host_id].used_ports = gpus, ports
    return slots


def _free_port(host: HostCapacity, trial: dict[int, tuple[list[int], set[int]]]) -> int | None:
    return lowest_free_port(host.port_range, trial[host.host_id][1])


def lowest_free_port(port_range: tuple[int, int], used: set[int]) -> int | None:
    low, high = port_range
    return next((p for p in range(low, high + 1) if p not in used), None)


def _why_not(needs: Sequence[TaskNeed], hosts: Sequence[HostCapacity], stuck: TaskNeed) -> str:
    """A reason a person can act on: what the job needs against what the cluster has free."""
    wanted = sum(n.gpus for n in needs)
    free = sum(len(h.free_gpus) for h in hosts)
    most = max(len(h.free_gpus) for h in hosts)
    if wanted > free:
        return _too_few_gpus(wanted, free)
    if stuck.gpus > most:
        return (
            f"{stuck.name} needs {stuck.gpus} GPUs on one host; the most free on any host is {most}"
        )
    if all(h.next_port() is None for h in hosts):
        return "no free ports left in any host's port range"
    return (
        f"its {len(needs)} tasks ({wanted} GPUs) do not fit together on the free hosts "
        f"({free} GPUs free across {len(hosts)} hosts)"
    )


def _too_few_gpus(wanted: int, free: int) -> str:
    return f"needs {wanted} GPUs on free hosts, cluster has {free} free"
