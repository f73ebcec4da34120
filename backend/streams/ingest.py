"""Metric ingest: many tasks' batches, bulk inserts, acknowledged only once committed.

A task's batch is acknowledged only after the insert that holds it has committed, so a
task that forgets acknowledged points loses nothing. Per task attempt the ingestor keeps the
highest sequence number stored; points at or below it are resends and are skipped, and the
unique key (job, task, attempt, seq) backs that up should two writes ever race.

Writers: SQLite has one (it allows one writer at a time anyway, and its driver runs on the
server's own GIL). PostgreSQL gets `POSTGRES_WRITERS` connections, so that the server
validates and encodes the next batches while PostgreSQL inserts and commits the previous
ones, instead of the two taking turns. Whatever the number of writers, each task attempt has
at most one write in flight: a writer takes batches in arrival order, skipping (with all
that came after it) any attempt another writer is storing, so the points of one attempt are
stored, and acknowledged, in the order they arrived. Each write updates the high-water marks
of exactly the attempts it stored, after its commit.

An attempt's high-water mark is kept while a task channel of it is open (`channel`), and
dropped once its last channel has closed and none of its batches waits to be stored: batches
come only over the attempt's own channel, so a finished attempt's can no longer arrive. A
channel that opens again (a reconnect) reads the mark from the database once more.

On PostgreSQL a write is one `INSERT ... SELECT FROM unnest(column arrays)` per task
attempt, without ON CONFLICT: the high-water mark already drops every point that could
conflict, and a plain insert costs PostgreSQL about a quarter less per row (see
`python -m bench.pg_insert_paths`). Should a duplicate slip through anyway (another server
process on the same database), the transaction fails on the unique key and is retried once
with ON CONFLICT DO NOTHING.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker

from agents.protocol import MetricPoint as WirePoint
from backend.streams.broker import Broker, job_topic
from backend.streams.frames import Columns, MetricsFrame
from backend.streams.models import MetricPoint

log = logging.getLogger(__name__)

AttemptKey = tuple[int, str, int]  # (job_id, task, attempt)
MAX_ROWS_PER_WRITE = 50_000
POSTGRES_WRITERS = 2


@dataclass
class _Pending:
    key: AttemptKey
    points: Sequence[WirePoint]
    done: asyncio.Future[int] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Ingestor:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        broker: Broker,
        writers: int | None = None,
    ) -> None:
        self._sessions = sessions
        self._broker = broker
        self._writers = writers
        self._pending: deque[_Pending] = deque()
        self._wake = asyncio.Event()
        self._in_flight: set[AttemptKey] = set()  # attempts a writer is storing right now
        self._stored: dict[AttemptKey, int] = {}
        self._channels: Counter[AttemptKey] = Counter()  # open task channels per attempt
        # Attempts whose last channel closed while a batch of theirs was still to be stored.
        self._closing: set[AttemptKey] = set()
        self.points_written = 0
        # Told, after each commit, every job's new points (the sweep runner's wake-up).
        self.on_stored: Callable[[int, Sequence[WirePoint]], None] | None = None
        self.conflicts = 0  # writes retried with ON CONFLICT (a duplicate reached the database)

    @property
    def attempts_tracked(self) -> int:
        """How many attempts' high-water marks are held in memory."""
        return len(self._stored)

    @contextlib.contextmanager
    def channel(self, key: AttemptKey) -> Iterator[None]:
        """While a task channel of this attempt is open: its high-water mark is kept, and
        forgotten once its last channel has closed and its batches are stored."""
        self._channels[key] += 1
        try:
            yield
        finally:
            self._channels[key] -= 1
            if not self._channels[key]:
                del self._channels[key]
                self._forget(key)

    def _forget(self, key: AttemptKey) -> None:
        if key in self._channels:
            return  # a channel of it opened again
        if key in self._in_flight or any(pending.key == key for pending in self._pending):
            self._closing.add(key)  # forgotten once that write is done
            return
        self._closing.discard(key)
        self._stored.pop(key, None)

    async def stored_through(self, key: AttemptKey) -> int:
        """The highest sequence number stored for an attempt (-1 when none)."""
        if key not in self._stored:
            async with self._sessions() as session:
                highest = await session.scalar(
                    select(func.max(MetricPoint.seq)).where(
                        MetricPoint.job_id == key[0],
                        MetricPoint.task == key[1],
                        MetricPoint.attempt == key[2],
                    )
                )
            self._stored.setdefault(key, -1 if highest is None else int(highest))
        return self._stored[key]

    async def submit(self, key: AttemptKey, points: Sequence[WirePoint]) -> int:
        """Store a batch; returns the highest sequence number now stored for the attempt."""
        await self.stored_through(key)
        pending = _Pending(key, points)
        self._pending.append(pending)
        self._wake.set()
        return await pending.done

    async def run(self) -> None:
        writers = self._writers or self._default_writers()
        async with asyncio.TaskGroup() as group:
            for index in range(writers):
                group.create_task(self._writer(), name=f"ingest-writer-{index}")

    def _default_writers(self) -> int:
        bind = self._sessions.kw.get("bind")
        dialect = getattr(getattr(bind, "dialect", None), "name", None)
        return POSTGRES_WRITERS if dialect == "postgresql" else 1

    async def _writer(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                self._wake.clear()
                await self._wake.wait()
                continue
            keys = {pending.key for pending in batch}
            self._in_flight |= keys
            try:
                await self._write(batch)
            except Exception as exc:
                log.exception("metric write of %d batches failed", len(batch))
                for pending in batch:
                    if not pending.done.done():
                        pending.done.set_exception(exc)
            finally:
                self._in_flight -= keys
                for key in keys & self._closing:
                    self._forget(key)
                if self._pending:
                    self._wake.set()  # batches held back for these attempts may go now

    def _take(self) -> list[_Pending]:
        """The next write: batches in arrival order, none of an attempt already in flight.

        Once a batch is held back, every later batch of its attempt is too, so that one
        attempt's batches are stored in the order they came.
        """
        batch: list[_Pending] = []
        held: list[_Pending] = []
        blocked = self._in_flight
        rows = 0
        while self._pending and rows < MAX_ROWS_PER_WRITE:
            pending = self._pending.popleft()
            if pending.key in blocked:
                held.append(pending)
                continue
            batch.append(pending)
            rows += len(pending.points)
        if held:
            self._pending.extendleft(reversed(held))
        return batch

    async def _write(self, batch: list[_Pending]) -> None:
        # Only the attempts in this write: the map of all attempts ever seen is not copied.
        highest = {pending.key: self._stored.get(pending.key, -1) for pending in batch}
        fresh: dict[AttemptKey, list[WirePoint]] = {}
        for pending in batch:
            high = highest[pending.key]
            points = fresh.setdefault(pending.key, [])
            for point in pending.points:
                if point.seq > high:
                    high = point.seq
                    points.append(point)
            highest[pending.key] = high
        rows = sum(len(points) for points in fresh.values())
        if rows:
            async with self._sessions() as session:
                connection = await session.connection()
                if connection.dialect.name == "postgresql":
                    try:
                        await _insert_postgres(connection, fresh, on_conflict=False)
                        await session.commit()
                    except IntegrityError:
                        await session.rollback()
                        self.conflicts += 1
                        log.warning("metric points were already stored; retrying the write")
                        connection = await session.connection()
                        await _insert_postgres(connection, fresh, on_conflict=True)
                        await session.commit()
                else:
                    await _insert_rows(connection, fresh)
                    await session.commit()
        self._stored.update(highest)
        self.points_written += rows
        for pending in batch:
            if not pending.done.done():
                pending.done.set_result(highest[pending.key])
        for key, points in fresh.items():
            if points and self.on_stored is not None:
                self.on_stored(key[0], points)
            topic = job_topic(key[0])
            if points and self._broker.subscribers(topic):
                self._broker.publish(topic, metrics_frame(key, points))


_COLUMNS = ("job_id", "task", "attempt", "seq", "name", "step", "value", "wall_time")


# Per task attempt: the attempt's three columns as constants, its points as one array per
# column. Straight to the driver: SQLAlchemy's parameter handling would cost more than the
# database itself at tens of thousands of rows a second.
_POSTGRES_UNNEST = (
    f"INSERT INTO {MetricPoint.__tablename__} ({', '.join(_COLUMNS)}) "  # noqa: S608
    "SELECT $1::integer, $2::varchar, $3::integer, u.* FROM unnest($4::bigint[], "
    "$5::varchar[], $6::bigint[], $7::double precision[], $8::double precision[]) AS u"
)
_ON_CONFLICT = " ON CONFLICT (job_id, task, attempt, seq) DO NOTHING"


async def _insert_postgres(
    connection: AsyncConnection,
    fresh: dict[AttemptKey, list[WirePoint]],
    *,
    on_conflict: bool,
) -> None:
    sql = _POSTGRES_UNNEST + _ON_CONFLICT if on_conflict else _POSTGRES_UNNEST
    for (job_id, task, attempt), points in fresh.items():
        if not points:
            continue
        values = [point.value for point in points]
        await connection.exec_driver_sql(
            sql,
            (
                job_id,
                task,
                attempt,
                [point.seq for point in points],
                [point.name for point in points],
                [point.step for point in points],
                # NULL stands for NaN (as on SQLite, which cannot store NaN).
                [value if value == value else None for value in values],
                [point.wall_time for point in points],
            ),
        )


async def _insert_rows(
    connection: AsyncConnection, fresh: dict[AttemptKey, list[WirePoint]]
) -> None:
    rows = [
        (
            job_id,
            task,
            attempt,
            point.seq,
            point.name,
            point.step,
            None if math.isnan(point.value) else point.value,
            point.wall_time,
        )
        for (job_id, task, attempt), points in fresh.items()
        for point in points
    ]
    await connection.exec_driver_sql(_insert_sql(connection.dialect.paramstyle), rows)


def _insert_sql(paramstyle: str) -> str:
    """One INSERT per row, for SQLite; resends are dropped by the unique key.

    Built from constants only (table, columns, placeholders); values travel as parameters.
    """
    if paramstyle == "qmark":
        marks = ", ".join("?" for _ in _COLUMNS)
    elif paramstyle == "numeric_dollar":
        marks = ", ".join(f"${i}" for i in range(1, len(_COLUMNS) + 1))
    else:
        marks = ", ".join("%s" for _ in _COLUMNS)
    return (
        f"INSERT INTO {MetricPoint.__tablename__} ({', '.join(_COLUMNS)}) VALUES ({marks}) "  # noqa: S608
        "ON CONFLICT (job_id, task, attempt, seq) DO NOTHING"
    )


def metrics_frame(key: AttemptKey, points: Sequence[WirePoint]) -> MetricsFrame:
    """Columnar series, as uPlot draws them: per metric name, [steps], [values], [times]."""
    series: dict[str, Columns] = {}
    for point in points:
        columns = series.get(point.name)
        if columns is None:
            columns = series[point.name] = ([], [], [])
        columns[0].append(point.step)
        # JSON has no NaN or infinity (browsers refuse them): a diverged loss is sent as null.
        columns[1].append(point.value if math.isfinite(point.value) else None)
        columns[2].append(point.wall_time)
    # Not validated again: the points were checked on arrival (or read back from the
    # database), and this runs for every batch stored, tens of thousands of points a second.
    return MetricsFrame.model_construct(
        type="metrics", task=key[1], attempt=key[2], last_seq=points[-1].seq, series=series
    )
