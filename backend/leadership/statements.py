"""The lease's statements (PostgreSQL): take or renew, check and hold, release; and each
replica's row, noted at every attempt, which says where the leader is reached.

Every time is the database's (`clock_timestamp()`), never a replica's, so that replicas'
clocks may disagree. A take locks the row FOR UPDATE and reads it again: two replicas taking
an expired lease at once are one after the other, and the second sees the first's take.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Interval, bindparam, delete, func, or_, select, text, update
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
    """Renew the lease held with epoch `held`, or take it if it is free, expired or this
    replica's. Returns the epoch now held; None when another replica holds the lease.

    A replica's own lease is taken back at once, expired or not: a restarted server need not
    wait out its predecessor's lease. The epoch stays only for the renewal of the very lease
    held (`held`); any other take, a take-back included, is a new epoch, which fences off
    whatever still wrote under the old one."""
    if held is not None and await _renew(connection, replica=replica, epoch=held, ttl=ttl):
        return held
    return await _take(connection, replica=replica, ttl=ttl)


def _expires(ttl: float) -> ColumnElement[datetime]:
    return func.clock_timestamp() + bindparam("ttl", timedelta(seconds=ttl), type_=Interval)


async def _renew(connection: AsyncConnection, *, replica: str, epoch: int, ttl: float) -> bool:
    """Extend the lease if this replica still holds it with `epoch`. The update changes no
    key column, so it takes a row lock that the fenced transactions' (FOR KEY SHARE) does not
    conflict with: a leader's renewal never waits for its own passes and requests."""
    renewed = await connection.scalar(
        update(Leadership)
        .where(Leadership.id == LEASE_ROW, Leadership.holder == replica, Leadership.epoch == epoch)
        .values(renewed_at=func.clock_timestamp(), expires_at=_expires(ttl))
        .returning(Leadership.epoch)
    )
    return renewed is not None


async def _take(connection: AsyncConnection, *, replica: str, ttl: float) -> int | None:
    """Take the lease with the next epoch if it is free, expired or this replica's."""
    takeable = or_(Leadership.holder == replica, Leadership.expires_at < func.clock_timestamp())
    found = (
        await connection.execute(select(takeable).where(Leadership.id == LEASE_ROW))
    ).one_or_none()
    if found is None:  # nobody has led on this database yet
        first = await connection.scalar(
            insert(Leadership)
            .values(
                id=LEASE_ROW,
                holder=replica,
                epoch=1,
                renewed_at=func.clock_timestamp(),
                expires_at=_expires(ttl),
            )
            .on_conflict_do_nothing(index_elements=[Leadership.id])
            .returning(Leadership.epoch)
        )
        return first  # None: another replica inserted it first, and holds it
    if not found[0]:  # read without a lock: the common answer of a follower
        return None
    # FOR UPDATE waits for every transaction fenced by the old epoch (FOR KEY SHARE) to end,
    # and reads the row as the last of them left it: renewed meanwhile, it is not taken.
    locked = await connection.scalar(
        select(takeable).where(Leadership.id == LEASE_ROW).with_for_update()
    )
    if not locked:
        return None
    epoch: int | None = await connection.scalar(
        update(Leadership)
        .where(Leadership.id == LEASE_ROW)
        .values(
            holder=replica,
            epoch=Leadership.epoch + 1,
            renewed_at=func.clock_timestamp(),
            expires_at=_expires(ttl),
        )
        .returning(Leadership.epoch)
    )
    return epoch


async def hold(session: AsyncSession, *, replica: str, epoch: int, idle_limit: float) -> bool:
    """Whether `replica` still holds the lease with `epoch`, keeping it so until the
    session's transaction ends: the row is read FOR KEY SHARE, so a takeover (which locks it
    FOR UPDATE) waits for this transaction, and one that committed before has changed the
    epoch; the holder's renewals, which lock it less, go on meanwhile.

    Expiry is not checked: while this transaction holds the row nobody can take it, and with
    the epoch unchanged nobody has led since. A leader paused inside the transaction would
    hold the row, and keep every takeover waiting, for as long as it is paused: the database
    ends the transaction once it has been idle `idle_limit` seconds (its commit then fails)."""
    await session.execute(
        text(f"SET LOCAL idle_in_transaction_session_timeout = {max(1, round(idle_limit * 1000))}")
    )
    found = await session.scalar(
        select(Leadership.epoch)
        .where(
            Leadership.id == LEASE_ROW,
            Leadership.holder == replica,
            Leadership.epoch == epoch,
        )
        .with_for_update(read=True, key_share=True)
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
