"""What a starting server claims before it serves: its identity and locks, then the lease.

SQLite: the database file is locked (one server per file) and the server is the `SoleLeader`.
PostgreSQL: the data dir is locked (one process per replica id) and a `LeaseKeeper` makes its
first attempt before the server serves, so that a restarted server leads from its first pass,
as soon as before it was replicated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from backend.db import create_engine
from backend.leadership.keeper_thread import KeeperThread
from backend.leadership.lease import Lease, LeaseKeeper, SoleLeader
from backend.leadership.replica import (
    HeldLock,
    load_or_create_replica_id,
    lock_replica,
    lock_sqlite,
    sqlite_file,
)


@dataclass
class Claim:
    """This replica's identity, lease and locks, held until `close`."""

    replica: str
    locks: list[HeldLock]
    lease: Lease = field(init=False)
    keeper: KeeperThread | None = None  # None on SQLite

    async def lead(self, engine: AsyncEngine, ttl: float, url: str) -> Lease:
        """The lease, tried once already on PostgreSQL; SQLite's one server just leads."""
        if engine.dialect.name == "sqlite":
            self.lease = SoleLeader(self.replica)
            return self.lease
        # A connection of its own, on the keeper's thread: neither a pool drained by a burst
        # of requests nor a busy event loop may hold up a renewal until the lease is lost.
        own = create_engine(engine.url.render_as_string(hide_password=False), pool_size=1)
        keeper = LeaseKeeper(engine=own, replica=self.replica, ttl=ttl, url=url)
        self.keeper = KeeperThread(keeper)
        self.lease = keeper
        await self.keeper.run(keeper.tick())
        return self.lease

    async def release_lease(self) -> None:
        if self.keeper is not None:
            await self.keeper.stop()

    def release_locks(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def claim(data_dir: Path, database_url: str) -> Claim:
    """Lock what this server needs to itself (ServerRefused when another server holds it)."""
    database = sqlite_file(database_url)
    locks = [lock_sqlite(database) if database is not None else lock_replica(data_dir)]
    try:
        return Claim(replica=load_or_create_replica_id(data_dir), locks=locks)
    except BaseException:
        locks[0].release()
        raise
