"""Drains: every job with live tasks on a draining host is moved off it by the interruption
path. A drain request starts that at once, with its own deadline; this pass catches what the
request could not: interruptions a server restart lost, a request another server took while
this one leads, a task that reached the host as the drain was committed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sqlalchemy import select

from backend.hosts.models import Host
from backend.scheduling.task_events import TaskAttempt, jobs_on
from backend.scheduling.transaction import Transaction


class Vacates(Protocol):
    """What the pass asks of the interrupter (scheduling/interruptions.Interrupter)."""

    @property
    def in_flight(self) -> Mapping[int, object]: ...

    def vacate(
        self,
        job_id: int,
        host: str,
        attempts: frozenset[TaskAttempt],
        deadline: float,
        *,
        why: str,
        cause: str,
    ) -> None: ...


def drain_reason(host: str) -> str:
    return f"{host} is being drained"


class Drains:
    def __init__(self, *, interrupter: Vacates, deadline: float) -> None:
        self.interrupter = interrupter
        self.deadline = deadline

    async def reconcile(self, tx: Transaction) -> None:
        draining = list(
            await tx.session.scalars(select(Host.name).where(Host.draining_since.is_not(None)))
        )
        for host in draining:
            for job_id, attempts in (await jobs_on(tx.session, host)).items():
                if job_id in self.interrupter.in_flight:
                    continue  # its interruption is under way
                self.interrupter.vacate(
                    job_id, host, attempts, self.deadline, why=drain_reason(host), cause="drain"
                )
