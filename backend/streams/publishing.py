"""Job events reach live subscribers once, and only once their transaction has committed.

A session listener collects the JobEvent rows each flush inserts and publishes them after
commit (dropping them on rollback), so no code that records an event has to remember to
publish it, and nobody ever sees an event that was rolled back. A savepoint's events wait
for the transaction around it: dropped if the savepoint rolls back, published with the rest
once the outer transaction commits. The same hook logs each job's
submission and status changes at INFO: the server's console follows jobs without the access
log, and never reports a change that was rolled back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy.orm import Session, SessionTransaction

from backend.jobs.events import EventKind
from backend.jobs.models import JobEvent
from backend.streams.broker import CLUSTER_TOPIC, Broker, job_topic
from backend.streams.frames import CheckpointFrame, EventFrame, StreamEvent

PENDING = "strata.pending_events"
SAVEPOINTS = "strata.event_savepoints"  # per open savepoint: how many events came before it
BROKER = "strata.broker"
# A reason can hold a failed task's last lines: the log gets its first line, this long at most.
LOGGED_REASON_CHARS = 200

# Named for what its lines are about: the console reads "backend.jobs: job 3 pending → ...".
log = logging.getLogger("backend.jobs")


class EventRow(Protocol):
    """A stored job event: a JobEvent, or what a many-row insert returned (lifecycle)."""

    @property
    def id(self) -> int: ...
    @property
    def job_id(self) -> int: ...
    @property
    def at(self) -> datetime: ...
    @property
    def kind(self) -> str: ...
    @property
    def task(self) -> str | None: ...
    @property
    def from_status(self) -> str | None: ...
    @property
    def to_status(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def actor(self) -> str | None: ...


def event_frame(row: EventRow) -> EventFrame | CheckpointFrame:
    """A stream frame for a job event. A checkpoint is an event of kind "checkpoint" (so it
    is durable, ordered and resumable with the rest) and travels as a `checkpoint` frame
    with the checkpoint beside the event."""
    event = StreamEvent(
        id=row.id,
        at=row.at,
        kind=row.kind,
        task=row.task,
        from_status=row.from_status,
        to_status=row.to_status,
        message=row.message,
        data=row.data,
        actor=row.actor,
    )
    if row.kind == EventKind.checkpoint and "checkpoint" in row.data:
        try:
            return CheckpointFrame(
                type="checkpoint",
                job_id=row.job_id,
                checkpoint=row.data["checkpoint"],
                deleted=row.data.get("deleted", []),
                event=event,
            )
        except ValidationError:
            # record_checkpoint writes these from a CheckpointRead; anything else (a row
            # edited by hand) goes out as a plain event rather than failing the publish.
            pass
    return EventFrame(type="event", job_id=row.job_id, event=event)


def collect(session: Session, _context: object) -> None:
    publish_after_commit(session, [obj for obj in session.new if isinstance(obj, JobEvent)])


def publish_after_commit(session: Session, rows: Iterable[EventRow]) -> None:
    """Publish these stored events once the session commits (never if it rolls back); what
    a flush inserts is collected by itself, rows inserted by a statement are given here."""
    if BROKER in session.info:
        session.info.setdefault(PENDING, []).extend(rows)


def publish(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: its events wait for the transaction around it
    rows: list[EventRow] = session.info.pop(PENDING, [])
    broker: Broker | None = session.info.get(BROKER)
    if broker is None:
        return
    for row in rows:
        log_job_event(row)
        frame = event_frame(row)
        broker.publish(job_topic(row.job_id), frame)
        broker.publish(CLUSTER_TOPIC, frame)


def log_job_event(row: EventRow) -> None:
    """One line for a job's submission or status change; other events (restarts of a task,
    checkpoints, requests) stay in the job's own event list."""
    if row.kind == EventKind.created:
        log.info("job %d %s", row.job_id, row.message)
    elif row.kind == EventKind.status:
        reason = (row.message or "").strip().splitlines()
        said = reason[0][:LOGGED_REASON_CHARS] if reason else ""
        log.info(
            "job %d %s → %s%s",
            row.job_id,
            row.from_status,
            row.to_status,
            f": {said}" if said else "",
        )


def savepoint_begun(session: Session, transaction: SessionTransaction) -> None:
    if transaction.nested and BROKER in session.info:
        marks = session.info.setdefault(SAVEPOINTS, {})
        marks[transaction] = len(session.info.get(PENDING, ()))


def discard(session: Session) -> None:
    savepoint = session.get_nested_transaction()
    mark = session.info.get(SAVEPOINTS, {}).get(savepoint)
    if mark is None:
        session.info.pop(PENDING, None)
    else:  # only what was flushed since the savepoint began
        del session.info.get(PENDING, [])[mark:]


def transaction_ended(session: Session, transaction: SessionTransaction) -> None:
    if transaction.nested:
        session.info.get(SAVEPOINTS, {}).pop(transaction, None)
    elif transaction.parent is None:
        # Committed (published already), rolled back, or closed without either.
        session.info.pop(PENDING, None)
        session.info.pop(SAVEPOINTS, None)
