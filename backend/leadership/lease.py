"""Whether this replica leads, and the fence of a leader-only transaction.

`LeaseKeeper` (PostgreSQL) holds the lease in the database: it takes it when it is free,
expired or its own, and renews it every third of its time to live. A renewal refused, or a
lease older than its time to live by this process's monotonic clock (a pause, a database that
does not answer), and the replica steps down at once. `SoleLeader` (SQLite) always leads: no
other server can run on its database (backend.leadership.replica)."""

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

    async def fence(self, session: AsyncSession) -> None:
        """Raise NotLeader unless the lease is held; held then until the transaction ends."""


class SoleLeader:
    """The one server of a SQLite database: always the leader, with no epoch."""

    def __init__(self, replica: str = "") -> None:
        self.replica = replica
        self.changes = 1  # it led from the start
        self.is_leader = True
        self.epoch: int | None = None

    async def fence(self, session: AsyncSession) -> None:
        return None


class LeaseKeeper:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        replica: str,
        ttl: float,
        on_change: OnChange | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.replica = replica
        self.ttl = ttl
        self.on_change = on_change
        self.clock = clock
        self.changes = 0
        self._held: int | None = None  # the epoch of the lease taken or last renewed
        self._valid_until = -math.inf  # by `clock`: the renewal's start plus the ttl

    @property
    def is_leader(self) -> bool:
        return self._held is not None and self.clock() < self._valid_until

    @property
    def epoch(self) -> int | None:
        return self._held if self.is_leader else None

    async def run(self) -> None:
        """Take or renew every third of the time to live, until cancelled."""
        while True:
            await self.tick()
            await asyncio.sleep(self.ttl / 3)

    async def tick(self) -> bool:
        """One attempt to take or renew the lease. Returns whether this replica leads."""
        if self._held is not None and not self.is_leader:
            self.step_down("its lease ran out before it was renewed")
        started = self.clock()  # the database's expiry is at least this plus the ttl
        try:
            async with asyncio.timeout(self.ttl), self.engine.begin() as connection:
                epoch = await statements.take_or_renew(
                    connection, replica=self.replica, held=self._held, ttl=self.ttl
                )
        except Exception as exc:
            # The lease may still be ours: it lapses here by the clock unless renewed in time.
            log.warning("renewing the leader's lease failed: %r", exc)
            return self.is_leader
        if epoch is None:
            self.step_down("another replica holds the lease")
            return False
        leading = self._held is not None
        self._held, self._valid_until = epoch, started + self.ttl
        if not leading:
            self.changes += 1
            log.info("replica %s leads (epoch %d)", self.replica, epoch)
            if self.on_change is not None:
                self.on_change(True)
        return True

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
        if not await statements.hold(session, replica=self.replica, epoch=epoch):
            self.step_down(f"the lease of epoch {epoch} was taken over")
            raise NotLeader(f"the lease of epoch {epoch} was taken over")

    async def release(self) -> None:
        """Give the lease up (the server stops): another replica may lead at once."""
        held = self._held
        if held is None:
            return
        self.step_down("the server stops")
        try:
            async with self.engine.begin() as connection:
                await statements.release(connection, replica=self.replica, epoch=held)
        except Exception as exc:
            log.warning("releasing the leader's lease failed (it expires): %r", exc)
