"""What the controller keeps in memory about the cluster between passes.

The database says what should run; this says what the agents last said they run, when each
was last heard from, which reports wait for the next pass, and what the hosts have free.
Every field is a cache or a queue that a restart of the server may lose: after one, agents
say hello again and everything here is rebuilt from what they report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agents.protocol import KEEPALIVE_PING_SECONDS, KEEPALIVE_TIMEOUT_SECONDS, RunningTask, TaskKey
from backend.scheduling.placement import HostCapacity
from backend.scheduling.running import RunningReports


@dataclass(frozen=True)
class StartMode:
    """How an agent started an attempt: in a warm process, or cold and why (agents/host/
    warm_pool.py)."""

    warm: bool
    cold_reason: str | None = None

    def words(self) -> str:
        if self.warm:
            return "started warm"
        return f"started cold ({self.cold_reason})" if self.cold_reason else "started cold"


@dataclass
class ClusterView:
    running: RunningReports = field(default_factory=RunningReports)
    # When each agent was last heard from (monotonic), noted as a frame arrives, before any
    # lock: a busy controller must not mistake its own backlog for a silent host.
    last_heard: dict[str, float] = field(default_factory=dict)
    heard_since_recorded: set[str] = field(default_factory=set)  # for the next pass to write
    heartbeats_recorded_at: float = 0.0
    last_compared: dict[str, float] = field(default_factory=dict)
    # Hosts whose last comparison found them running exactly what they should, with no
    # command sent to them since: their heartbeats need no comparison until what they run
    # changes: comparing every host anyway would cost a transaction per host each time.
    settled: set[str] = field(default_factory=set)
    # Agents' reports kept for the next pass, which applies them all in one transaction: one
    # transaction per report, each waiting for the lock, falls behind when many agents report.
    reported_starts: dict[str, list[tuple[TaskKey, int]]] = field(default_factory=dict)
    # How those starts came about, when the agent said: warm, or cold and why (for the event).
    start_modes: dict[TaskKey, StartMode] = field(default_factory=dict)
    to_compare: dict[str, list[RunningTask]] = field(default_factory=dict)
    # What the cluster looked like when the queued jobs last found no room, and when, and
    # the jobs that found none since (backend.scheduling.reconcilers.pending_jobs).
    unplaced: tuple[object, ...] | None = None
    unplaced_at: float = 0.0
    passed_over: set[int] = field(default_factory=set)
    # What the hosts have free, kept between passes while nothing but placement changes it
    # (placement updates it as it places): reading it from the database costs more than the
    # rest of a pass, and a pass runs for every submission. Anything that may free or
    # take capacity otherwise drops it (capacity_changed); it is read again every few seconds.
    capacity: list[HostCapacity] | None = None
    capacity_key: tuple[int, float] = (-1, 0.0)  # (the hub's changes, monotonic read time)
    started: float = field(default_factory=time.monotonic)
    # Pending jobs that preempted others for their room, with those jobs: the victims are
    # not placed again, and the job waits for them to stop (reconcilers/preemptions.py).
    preempting: dict[int, set[int]] = field(default_factory=dict)

    def term_began(self) -> None:
        """This replica took over: a lost host's grace counts from when agents can have
        found it. An agent still connected to a paused leader notices only when its
        keepalive gives up; one whose leader died, at once."""
        self.started = time.monotonic() + KEEPALIVE_PING_SECONDS + KEEPALIVE_TIMEOUT_SECONDS

    def heard_from(self, host: str) -> None:
        self.last_heard[host] = time.monotonic()
        self.heard_since_recorded.add(host)

    def capacity_changed(self) -> None:
        self.capacity = None

    def job_runs(self, job_id: int) -> bool:
        """Whether an agent still runs any attempt of any task of the job."""
        return self.running.job_runs(job_id)

    def preempted_for(self, job_id: int) -> int | None:
        """The pending job this one was preempted for, while that one waits for its room."""
        return next((by for by, victims in self.preempting.items() if job_id in victims), None)

    def old_attempt_running(self, job_id: int, task: str, attempt: int) -> bool:
        """Whether an agent still runs an earlier attempt of this task (its port is taken)."""
        return self.running.earlier_attempt_runs(job_id, task, attempt)

    def compared(self, host: str, keys: frozenset[TaskKey], agrees: bool, commanded: bool) -> None:
        """Note a finished comparison of what a host runs (commanded: it was sent something)."""
        self.last_compared[host] = time.monotonic()
        self.running.report(host, keys)
        if agrees and not commanded:
            self.settled.add(host)
        else:
            self.settled.discard(host)

    def commanded(self, hosts: set[str]) -> None:
        """Hosts sent a command are unsettled until a comparison sees that they followed it
        (or the command is sent again)."""
        self.settled -= hosts

    def forget(self, host: str) -> None:
        """The host was lost, and what it ran with it."""
        self.running.forget(host)

    def forget_host(self, host: str) -> None:
        """The host's name was released (`strata hosts forget`): all that was known of it."""
        self.forget(host)
        self.last_heard.pop(host, None)
        self.last_compared.pop(host, None)
        self.settled.discard(host)
        self.to_compare.pop(host, None)
        self.reported_starts.pop(host, None)
