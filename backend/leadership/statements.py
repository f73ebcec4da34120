"""The lease's statements (PostgreSQL): take or renew, check and hold, release.

Every time is the database's (`clock_timestamp()`), never a replica's, so that replicas'
clocks may disagree. Each statement is atomic by itself: two replicas taking an expired lease
at once update one row, and the second sees the first's renewal and takes nothing.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Interval, and_, bindparam, case, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from backend.leadership.models import LEASE_ROW, Leadership


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
