"""The lease's statements (PostgreSQL): take or renew, check and hold, release; and each
replica's row, noted at every attempt, which says where the leader is reached.

Every time is the database's (`clock_timestamp()`), never a replica's, so that replicas'
clocks may disagree. Each statement is atomic by itself: two replicas taking an expired lease
at once update one row, and the second sees the first's renewal and takes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Interval, and_, bindparam, case, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from backend.leadership.models import LEASE_ROW, Leadership, ServerReplica


@dataclass(frozen=True)
class Holder:
    """Who holds the lease, as one replica's attempt found it."""

    replica: str
    epoch: int
    url: str | None  # where it is reached; None if it noted no row (yet)
    seconds_left: float  # until it expires by the database's clock (negative: expired)


async def take_or_renew(
    connection: AsyncConnection, *, replica: str, held: int | None, ttl: float
) -> int | None:
    """Take the lease if it is free, expired or this replica's, or renew the one held with
    epoch `held`. Returns the epoch now held; None when another replica holds the lease.

    A replica's own lease is taken back at once, expired or not: a restarted server need not
    wait out its predecessor's lease. The epoch stays only for the renewal of the very lease
    held (`held`); any other take, a take-back included, is a new epoch, which fences off
    whatever still wrote under the old one."""
    now = func.clock_timestamp()
    expires = now + bindparam("ttl", timedelta(seconds=ttl), type_=Interval)
    statement = insert(Leadership).values(
        id=LEASE_ROW, holder=replica, epoch=1, renewed_at=now, expires_at=expires
    )
    new = statement.excluded
    renewal = and_(Leadership.holder == new.holder, Leadership.epoch == held)
    statement = statement.on_conflict_do_update(
        index_elements=[Leadership.id],
        set_={
            "holder": new.holder,
            "epoch": case((renewal, Leadership.epoch), else_=Leadership.epoch + 1),
            "renewed_at": new.renewed_at,
            "expires_at": new.expires_at,
        },
        where=or_(Leadership.holder == new.holder, Leadership.expires_at < func.clock_timestamp()),
    )
    epoch: int | None = await connection.scalar(statement.returning(Leadership.epoch))
    return epoch


async def hold(session: AsyncSession, *, replica: str, epoch: int) -> bool:
    """Whether `replica` still holds the lease with `epoch`, keeping it so until the
    session's transaction ends: the row is read FOR SHARE, so a takeover's update waits for
    this transaction, and one that committed before has changed the epoch.

    Expiry is not checked: while this transaction holds the row nobody can take it, and with
    the epoch unchanged nobody has led since."""
    found = await session.scalar(
        select(Leadership.epoch)
        .where(
            Leadership.id == LEASE_ROW,
            Leadership.holder == replica,
            Leadership.epoch == epoch,
        )
        .with_for_update(read=True)
    )
    return found is not None


async def release(connection: AsyncConnection, *, replica: str, epoch: int) -> None:
    """Let the lease expire now (a server stopping): another replica may take it at once."""
    await connection.execute(
        update(Leadership)
        .where(
            Leadership.id == LEASE_ROW,
            Leadership.holder == replica,
            Leadership.epoch == epoch,
        )
        .values(expires_at=func.clock_timestamp())
    )


async def note_replica(connection: AsyncConnection, *, replica: str, url: str) -> None:
    """This replica is alive and reached at `url` (inserted at its first attempt)."""
    now = func.clock_timestamp()
    statement = insert(ServerReplica).values(
        replica=replica, url=url, started_at=now, renewed_at=now
    )
    await connection.execute(
        statement.on_conflict_do_update(
            index_elements=[ServerReplica.replica],
            set_={"url": statement.excluded.url, "renewed_at": statement.excluded.renewed_at},
        )
    )


async def holder(connection: AsyncConnection) -> Holder | None:
    """Who holds the lease and where it is reached; None before anyone has led."""
    seconds_left = func.extract("epoch", Leadership.expires_at - func.clock_timestamp())
    row = (
        await connection.execute(
            select(Leadership.holder, Leadership.epoch, ServerReplica.url, seconds_left)
            .outerjoin(ServerReplica, ServerReplica.replica == Leadership.holder)
            .where(Leadership.id == LEASE_ROW)
        )
    ).one_or_none()
    if row is None:
        return None
    return Holder(replica=row[0], epoch=row[1], url=row[2], seconds_left=float(row[3]))


async def forget_replica(connection: AsyncConnection, *, replica: str) -> None:
    """The replica stopped: it is no longer listed."""
    await connection.execute(delete(ServerReplica).where(ServerReplica.replica == replica))


async def replicas(session: AsyncSession) -> tuple[Leadership | None, bool, list[ServerReplica]]:
    """The lease row, whether it is unexpired now, and every replica, oldest first."""
    lease = (
        await session.execute(
            select(Leadership, Leadership.expires_at > func.clock_timestamp()).where(
                Leadership.id == LEASE_ROW
            )
        )
    ).one_or_none()
    listed = await session.scalars(select(ServerReplica).order_by(ServerReplica.started_at))
    if lease is None:
        return None, False, list(listed)
    return lease[0], bool(lease[1]), list(listed)
