"""What a job stream sends before going live: bounded history after a cursor."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import TypeVar

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import MetricPoint as WirePoint
from backend.db import to_the_end
from backend.jobs.models import JobEvent, Task
from backend.streams.cursor import Cursor, attempt_id
from backend.streams.frames import CheckpointFrame, EventFrame, LogFrame, MetricsFrame, ServerFrame
from backend.streams.ingest import metrics_frame
from backend.streams.logs import LogStore
from backend.streams.models import MetricPoint
from backend.streams.publishing import event_frame

HISTORY_EVENTS = 1_000  # the newest ones, when there are more
HISTORY_POINTS = 20_000  # per task attempt, the newest ones
HISTORY_LINES = 2_000  # per task attempt, the newest ones when the cursor is that far behind
POINTS_PER_FRAME = 5_000

T = TypeVar("T")


async def job_history(
    *, session: AsyncSession, logs: LogStore, job_id: int, cursor: Cursor
) -> AsyncIterator[EventFrame | CheckpointFrame | MetricsFrame | LogFrame]:
    """Frames of history after the cursor, advancing the cursor as they are produced."""
    events = await _rows(
        session,
        select(JobEvent)
        .where(JobEvent.job_id == job_id, JobEvent.id > cursor.event)
        .order_by(JobEvent.id.desc())
        .limit(HISTORY_EVENTS),
    )
    for row in reversed(events):
        cursor.event = row.id
        yield event_frame(row)

    tasks = await _rows(session, select(Task).where(Task.job_id == job_id).order_by(Task.id))
    for task in tasks:
        for attempt in range(task.attempt + 1):
            key = attempt_id(task.name, attempt)
            after = cursor.metrics.get(key, -1)
            rows = await _rows(
                session,
                select(MetricPoint)
                .where(
                    MetricPoint.job_id == job_id,
                    MetricPoint.task == task.name,
                    MetricPoint.attempt == attempt,
                    MetricPoint.seq > after,
                )
                .order_by(MetricPoint.seq.desc())
                .limit(HISTORY_POINTS),
            )
            rows.reverse()
            for start in range(0, len(rows), POINTS_PER_FRAME):
                chunk = [
                    WirePoint(
                        seq=r.seq,
                        name=r.name,
                        step=r.step,
                        value=math.nan if r.value is None else r.value,
                        wall_time=r.wall_time,
                    )
                    for r in rows[start : start + POINTS_PER_FRAME]
                ]
                cursor.metrics[key] = chunk[-1].seq
                yield metrics_frame((job_id, task.name, attempt), chunk)

            have = cursor.logs.get(key, 0)
            total = logs.lines_in(job_id, task.name, attempt)
            if total > have:
                start_line = max(have, total - HISTORY_LINES)
                page = logs.read(
                    job_id, task.name, attempt, offset=start_line, limit=total - start_line
                )
                if page.lines:
                    cursor.logs[key] = page.first_line + len(page.lines)
                    yield log_frame(task.name, attempt, page.first_line, page.lines)


async def _rows(session: AsyncSession, statement: Select[T]) -> list[T]:
    # To its end even if the client leaves meanwhile (see `to_the_end`).
    return list(await to_the_end(session.scalars(statement)))


def log_frame(task: str, attempt: int, first_line: int, lines: list[str]) -> LogFrame:
    # Not validated again: the lines were checked on arrival (or read back from the file),
    # up to thousands at a time.
    return LogFrame.model_construct(
        type="log", task=task, attempt=attempt, first_line=first_line, lines=lines
    )


def advance(cursor: Cursor, frame: ServerFrame) -> ServerFrame | None:
    """Trim a live frame to what the cursor has not seen, and move the cursor past it."""
    if isinstance(frame, EventFrame | CheckpointFrame):
        if frame.event.id <= cursor.event:
            return None
        cursor.event = frame.event.id
        return frame
    if isinstance(frame, MetricsFrame):
        key = attempt_id(frame.task, frame.attempt)
        seen = cursor.metrics.get(key, -1)
        # Points are committed before they are published, and history is read after the
        # subscription starts: a live frame is either wholly in history or wholly new.
        if frame.last_seq <= seen:
            return None
        cursor.metrics[key] = frame.last_seq
        return frame
    if isinstance(frame, LogFrame):
        key = attempt_id(frame.task, frame.attempt)
        seen = cursor.logs.get(key, 0)
        end = frame.first_line + len(frame.lines)
        if end <= seen:
            return None
        skip = max(0, seen - frame.first_line)
        cursor.logs[key] = end
        if skip:
            return log_frame(frame.task, frame.attempt, seen, frame.lines[skip:])
        return frame
    return frame
