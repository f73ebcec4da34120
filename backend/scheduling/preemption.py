"""Which running jobs a pending job of higher priority may interrupt to take their place.
Pure: placement tried again on a copy of the hosts, with the candidates' tasks taken off.

Candidates are preemptible running jobs of lower priority; the fewest GPUs and the least
work lost go first (a job whose workers can checkpoint at any step loses none; one under
multi_worker_mirrored loses the steps since its last epoch's backup), and the plan never
takes more than placement needs: each chosen job is dropped again if the job fits without.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from backend.scheduling.placement import HostCapacity, TaskNeed, Unplaceable, place


@dataclass(frozen=True)
class HeldPlace:
    """A live task's hold on a host: its GPUs and port."""

    host_id: int
    gpus: tuple[int, ...]
    port: int | None


@dataclass(frozen=True)
class Candidate:
    job_id: int
    priority: int
    project_id: int
    places: tuple[HeldPlace, ...]
    loses_work: bool = False  # it cannot checkpoint at any step (multi_worker_mirrored)

    @property
    def gpus(self) -> int:
        return sum(len(place.gpus) for place in self.places)


def _freed(hosts: Sequence[HostCapacity], chosen: Sequence[Candidate]) -> list[HostCapacity]:
    """A copy of the hosts with the chosen jobs' GPUs and ports given back."""
    copies = {host.host_id: copy.deepcopy(host) for host in hosts}
    for candidate in chosen:
        for held in candidate.places:
            host = copies.get(held.host_id)
            if host is None:
                continue
            host.free_gpus = sorted({*host.free_gpus, *held.gpus})
            if held.port is not None:
                host.used_ports.discard(held.port)
    return list(copies.values())


def fits(
    needs: Sequence[TaskNeed],
    hosts: Sequence[HostCapacity],
    chosen: Sequence[Candidate],
    image: str | None,
) -> bool:
    return not isinstance(place(needs, _freed(hosts, chosen), image=image), Unplaceable)


def plan_preemption(
    needs: Sequence[TaskNeed],
    hosts: Sequence[HostCapacity],
    candidates: Sequence[Candidate],
    *,
    priority: int,
    image: str | None = None,
) -> list[Candidate] | None:
    """The jobs to interrupt so that `needs` (of a job of `priority`) can be placed, or None
    when no choice among the candidates of lower priority makes room."""
    eligible = sorted(
        (c for c in candidates if c.priority < priority),
        key=lambda c: (c.gpus, c.loses_work, c.priority, -c.job_id),
    )
    chosen: list[Candidate] = []
    for candidate in eligible:
        chosen.append(candidate)
        if fits(needs, hosts, chosen, image):
            break
    else:
        return None
    # Never more than it needs: drop any (the biggest first) it still fits without.
    for candidate in sorted(chosen, key=lambda c: -c.gpus):
        rest = [c for c in chosen if c is not candidate]
        if fits(needs, hosts, rest, image):
            chosen = rest
    return chosen
