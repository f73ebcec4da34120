"""Metric ingest: many tasks' batches, one writer, one bulk insert per write.

A task's batch is acknowledged only after the insert that holds it has committed, so a
task that forgets acknowledged points loses nothing. Per task attempt the writer keeps the
highest sequence number stored; points at or below it are resends and are skipped, and the
unique key (job, task, attempt, seq) backs that up should two writes ever race.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.protocol import MetricPoint as WirePoint
from backend.streams.broker import Broker, job_topic
from backend.streams.models import MetricPoint

log = logging.getLogger(__name__)

AttemptKey = tuple[int, str, int]  # (job_id, task, attempt)
MAX_ROWS_PER_WRITE = 50_000


@dataclass
class _Pending:
    key: AttemptKey
    points: Sequence[WirePoint]
    done: asyncio.Future[int] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Ingestor:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], broker: Broker) -> None:
        self._sessions = sessions
        self._broker = broker
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._stored: dict[AttemptKey, int] = {}
        self.points_written = 0

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
        self._queue.put_nowait(pending)
        return await pending.done

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            rows = len(batch[0].points)
            while rows < MAX_ROWS_PER_WRITE and not self._queue.empty():
                batch.append(self._queue.get_nowait())
                rows += len(batch[-1].points)
            try:
                await self._write(batch)
            except Exception as exc:
                log.exception("metric write of %d rows failed", rows)
                for pending in batch:
                    if not pending.done.done():
                        pending.done.set_exception(exc)

    async def _write(self, batch: list[_Pending]) -> None:
        rows: list[tuple[Any, ...]] = []
        fresh: dict[AttemptKey, list[WirePoint]] = defaultdict(list)
        # Only the attempts in this write: the map of all attempts ever seen is not copied.
        highest = {pending.key: self._stored.get(pending.key, -1) for pending in batch}
        for pending in batch:
            job_id, task, attempt = pending.key
            for point in pending.points:
                if point.seq <= highest[pending.key]:
                    continue
                highest[pending.key] = point.seq
                fresh[pending.key].append(point)
                value = None if math.isnan(point.value) else point.value
                rows.append(
                    (
                        job_id,
                        task,
                        attempt,
                        point.seq,
                        point.name,
                        point.step,
                        value,
                        point.wall_time,
                    )
                )
        if rows:
            async with self._sessions() as session:
                connection = await session.connection()
                # Straight to the driver: SQLAlchemy's per-row parameter handling cost more
                # than the database itself at tens of thousands of rows a second.
                if connection.dialect.name == "postgresql":
                    # One statement, one round trip: the batch as one array per column.
                    columns = [list(column) for column in zip(*rows, strict=True)]
                    await connection.exec_driver_sql(_POSTGRES_UNNEST, tuple(columns))
                else:
                    await connection.exec_driver_sql(
                        _insert_sql(connection.dialect.paramstyle), rows
                    )
                await session.commit()
        self._stored.update(highest)
        self.points_written += len(rows)
        for pending in batch:
            if not pending.done.done():
                pending.done.set_result(self._stored.get(pending.key, -1))
        for key, points in fresh.items():
            self._broker.publish(job_topic(key[0]), metrics_frame(key, points))


_COLUMNS = ("job_id", "task", "attempt", "seq", "name", "step", "value", "wall_time")


_POSTGRES_UNNEST = (
    f"INSERT INTO metric_points ({', '.join(_COLUMNS)}) "  # noqa: S608 - constants only
    "SELECT * FROM unnest($1::integer[], $2::varchar[], $3::integer[], $4::bigint[], "
    "$5::varchar[], $6::bigint[], $7::double precision[], $8::double precision[]) "
    "ON CONFLICT (job_id, task, attempt, seq) DO NOTHING"
)


def _insert_sql(paramstyle: str) -> str:
    """One INSERT for every backend we support; resends are dropped by the unique key.

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


def metrics_frame(key: AttemptKey, points: Sequence[WirePoint]) -> dict[str, Any]:
    """Columnar series, as uPlot draws them: per metric name, [steps], [values], [times]."""
    series: dict[str, list[list[float | None]]] = {}
    for point in points:
        columns = series.setdefault(point.name, [[], [], []])
        columns[0].append(point.step)
        # JSON has no NaN or infinity (browsers refuse them): a diverged loss is sent as null.
        columns[1].append(point.value if math.isfinite(point.value) else None)
        columns[2].append(point.wall_time)
    return {
        "type": "metrics",
        "task": key[1],
        "attempt": key[2],
        "last_seq": points[-1].seq,
        "series": series,
    }
