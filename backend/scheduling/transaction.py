"""One change to jobs and tasks: its session, and the commands it decided, sent after commit.

Every service function that changes jobs or tasks takes a Transaction (keyword-only), flushes
through it and never commits: the controller owns the commit (see Controller.apply).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import CollectStacks, TaskKey
from backend.jobs.models import Job, Task
from backend.monitoring.instruments import ServerMetrics
from backend.scheduling.executors import Agents, Executors
from backend.scheduling.health_notes import HealthNotes
from backend.scheduling.outbox import CommandOutbox


@dataclass
class Transaction:
    session: AsyncSession
    executors: Executors  # where tasks run: each job's executor, over the agents
    outbox: CommandOutbox = field(default_factory=CommandOutbox)
    # What to note in memory once the transaction has committed (never if it rolls back).
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    monitor: ServerMetrics | None = None  # the server's instruments (/metrics)
    health: HealthNotes | None = None  # where hosts' infrastructure failures are counted

    def observe(self, record: Callable[[ServerMetrics], None]) -> None:
        """Record something in the server's metrics once this transaction has committed (a
        restart decided, a job placed): never for a change that was rolled back."""
        monitor = self.monitor
        if monitor is not None:
            self.after_commit.append(lambda: record(monitor))

    def infrastructure_failure(self, host: str, evidence: dict[str, Any]) -> None:
        """Count a task's infrastructure failure against its host once this commits."""
        notes = self.health
        if notes is not None:
            self.after_commit.append(lambda: notes.failed(host, evidence))

    @property
    def agents(self) -> Agents:
        return self.executors.agents

    def start(self, host: str, job: Job, task: Task, *, force: bool = False) -> None:
        """Start the task's current attempt on that host, once this transaction commits."""
        self.agents.start(self.outbox, host, job, task, force=force)

    def stop(self, host: str, key: TaskKey, reason: str, *, force: bool = False) -> None:
        """Stop that attempt on that host, once this transaction commits."""
        self.agents.stop(self.outbox, host, key, reason, force=force)

    def collect_stacks(self, host: str, keys: list[TaskKey], reason: str) -> None:
        """Have that host's agent write these attempts' stacks into their logs, once this
        transaction commits."""
        self.outbox.add(host, CollectStacks(keys=keys, reason=reason[:1024]))
