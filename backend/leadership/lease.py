"""Whether this replica leads, and the fence of a leader-only transaction.

`LeaseKeeper` (PostgreSQL) holds the lease in the database: it takes it when it is free,
expired or its own, and renews it every third of its time to live. A renewal refused, or a
lease older than its time to live by this process's monotonic clock (a pause, a database that
does not answer), and the replica steps down at once. A follower tries again as the lease it
saw expires, and knows where the leader is reached (`leader_url`). `SoleLeader` (SQLite)
always leads: no other server can run on its database (backend.leadership.replica).

A replica another one has led after is *superseded*: what it kept in memory of its own term
(connections, progress, timers) is stale, and the server exits for its supervisor to start
it afresh (`on_superseded`). One that only missed renewals and takes its own lease back with
the very next epoch is not: nobody led in between.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from backend.leadership import statements

log = logging.getLogger("strata.leadership")

# Told True when this replica becomes the leader, False when it steps down.
OnChange = Callable[[bool], None]
# Told why, once, when another replica led after this one (see the module's docstring).
OnSuperseded = Callable[[str], None]


class NotLeader(Exception):
    """This replica does not hold the lease (any more): the fenced transaction must write
    nothing, and the replica has stepped down."""


class Lease(Protocol):
    replica: str
    changes: int  # how often this replica became or stopped being the leader

    @property
    def is_leader(self) -> bool: ...

    @property
    def epoch(self) -> int | None: ...

    @property
    def leader_url(self) -> str | None:
        """Where the leader is reached; None while nobody leads (a takeover is under way)."""

    async def fence(self, session: AsyncSession) -> None:
        """Raise NotLeader unless the lease is held; held then until the transaction ends."""


class SoleLeader:
    """The one server of a SQLite database: always the leader, with no epoch."""

    def __init__(self, replica: str = "") -> None:
        self.replica = replica
        self.changes = 1  # it led from the start
        self.is_leader = True
        self.epoch: int | None = None
        self.leader_url: str | None = None  # never asked: it is the leader

    async def fence(self, session: AsyncSession) -> None:
        return None


class LeaseKeeper:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        replica: str,
        ttl: float,
        url: str = "",
        on_change: OnChange | None = None,
        on_superseded: OnSuperseded | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.replica = replica
        self.ttl = ttl
        self.url = url  # where the other replicas forward to this one while it leads
        self.on_change = on_change
        self.on_superseded = on_superseded
        self.clock = clock
        self.changes = 0
        self.superseded: str | None = None  # why, once another replica led after this one
        self._held: int | None = None  # the epoch of the lease taken or last renewed
        self._last_held: int | None = None  # ... kept after stepping down
        self._valid_until = -math.inf  # by `clock`: the renewal's start plus the ttl
        self._other: statements.Holder | None = None  # another replica's lease, as last seen
        self._other_until = -math.inf  # by `clock`: when that lease expires

    @property
    def is_leader(self) -> bool:
        return self._held is not None and self.clock() < self._valid_until

    @property
    def epoch(self) -> int | None:
        return self._held if self.is_leader else None

    @property
    def leader_url(self) -> str | None:
        if self.is_leader:
            return self.url
        other = self._other
        if other is None or other.url is None or self.clock() >= self._other_until:
            return None
        return other.url

    def next_delay(self) -> float:
        """Seconds to the next attempt: a third of the time to live; a follower tries as
        soon as the lease it saw expires, so that a dead leader is replaced in one ttl."""
        delay = self.ttl / 3
        if not self.is_leader and self._other is not None:
            delay = min(delay, max(0.02, self._other_until - self.clock() + 0.02))
        return delay

    async def run(self) -> None:
        """Take or renew until cancelled, every `next_delay`."""
        while True:
            await self.tick()
            delay = self.next_delay()
            woke = self.clock() + delay
            await asyncio.sleep(delay)
            if (late := self.clock() - woke) > self.ttl / 3:
                log.warning("the lease's keeper woke %.1f s late", late)

    async def tick(self) -> bool:
        """One attempt to take or renew the lease. Returns whether this replica leads."""
        if self._held is not None and not self.is_leader:
            self.step_down("its lease ran out before it was renewed")
        started = self.clock()  # the database's expiry is at least this plus the ttl
        other: statements.Holder | None = None
        try:
            async with asyncio.timeout(self.ttl), self.engine.begin() as connection:
                await statements.note_replica(connection, replica=self.replica, url=self.url)
                epoch = await statements.take_or_renew(
                    connection, replica=self.replica, held=self._held, ttl=self.ttl
                )
                if epoch is None:
                    other = await statements.holder(connection)
        except Exception as exc:
            # The lease may still be ours: it lapses here by the clock unless renewed in time.
            log.warning("renewing the leader's lease failed: %r", exc)
            return self.is_leader
        took = self.clock() - started
        if took > self.ttl / 3:  # a lease this slow to renew is close to being lost
            log.warning("taking or renewing the lease took %.1f s", took)
        if epoch is None:
            self._other = other
            if other is not None:  # its lease as this clock counts, from before the attempt
                self._other_until = started + other.seconds_left
            self.step_down("another replica holds the lease")
            if self._last_held is not None:
                self.supersede(f"replica {other.replica if other else '?'} leads")
            return False
        self._other = None
        leading = self._held is not None
        self._held, self._valid_until = epoch, started + self.ttl
        if not leading:
            if self._last_held is not None and epoch != self._last_held + 1:
                # Taken back after another replica's term (each take is one more epoch).
                self.supersede(f"epoch {self._last_held + 1} to {epoch - 1} led elsewhere")
            self._last_held = epoch
            self.changes += 1
            log.info("replica %s leads (epoch %d)", self.replica, epoch)
            if self.on_change is not None:
                self.on_change(True)
        return True

    def supersede(self, why: str) -> None:
        """Another replica led after this one (see the module's docstring): told once."""
        if self.superseded is not None:
            return
        self.superseded = why
        log.warning("replica %s was superseded: %s", self.replica, why)
        if self.on_superseded is not None:
            self.on_superseded(why)

    def step_down(self, why: str) -> None:
        if self._held is None:
            return
        log.warning("replica %s steps down (epoch %d): %s", self.replica, self._held, why)
        self._held, self._valid_until = None, -math.inf
        self.changes += 1
        if self.on_change is not None:
            self.on_change(False)

    async def fence(self, session: AsyncSession) -> None:
        epoch = self.epoch
        if epoch is None:
            raise NotLeader(f"replica {self.replica} does not lead")
        held = await statements.hold(
            session, replica=self.replica, epoch=epoch, idle_limit=2 * self.ttl
        )
        if not held:
            self.step_down(f"the lease of epoch {epoch} was taken over")
            self.supersede(f"the lease of epoch {epoch} was taken over")
            raise NotLeader(f"the lease of epoch {epoch} was taken over")

    async def release(self) -> None:
        """Give the lease up (the server stops): another replica may lead at once; and
        the replica is no longer listed."""
        held = self._held
        self.step_down("the server stops")
        try:
            async with self.engine.begin() as connection:
                if held is not None:
                    await statements.release(connection, replica=self.replica, epoch=held)
                await statements.forget_replica(connection, replica=self.replica)
        except Exception as exc:
            log.warning("releasing the leader's lease failed (it expires): %r", exc)
