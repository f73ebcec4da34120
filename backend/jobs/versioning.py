"""Jobs' optimistic concurrency, kept when many jobs change in one flush.

Every UPDATE of a job names the version it read and bumps it (Job's `version_id_col`), so a
change made from a stale view of a job fails with StaleDataError. SQLAlchemy then writes each
job in a statement of its own; a pass that placed fifty jobs and applied the starts of fifty
others made a round trip per job, each waiting for a turn of a busy event loop. Here the jobs
a flush would update (status, reason and times only) are written first, together, with the
same check: one UPDATE ... FROM a list of (id, version read, new values), RETURNING the ids it
matched. A job it did not match changed under the flush, which fails as SQLAlchemy's would.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Table, event, inspect, literal, select, union_all, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.exc import StaleDataError

from backend.db import utcnow
from backend.jobs.models import Job

# The columns written this way: plain values. A job with any other change (its spec, say)
# is left to SQLAlchemy's own UPDATE.
TOGETHER = frozenset(
    {"status", "reason", "updated_at", "started_at", "finished_at", "restart_count"}
)
LEAST = 2  # one job gains nothing from this
PAGE = 200  # jobs per statement (bound parameters stay well under SQLite's limit)


@event.listens_for(Session, "before_flush")
def _update_jobs_together(session: Session, _context: object, _instances: object) -> None:
    # Registered after backend.jobs.models' own before_flush hook (this module imports it
    # first), which marks the jobs of changed tasks: those are written here too.
    changed: dict[tuple[str, ...], list[tuple[Job, dict[str, Any]]]] = defaultdict(list)
    for job in session.dirty:
        if not isinstance(job, Job):
            continue
        values = _changes(job)
        if values is not None:
            changed[tuple(sorted(values))].append((job, values))
    if sum(len(jobs) for jobs in changed.values()) < LEAST:
        return
    connection = session.connection()
    for keys, jobs in changed.items():
        for first in range(0, len(jobs), PAGE):
            page = jobs[first : first + PAGE]
            matched = set(connection.scalars(_statement(keys, page)))
            stale = [job.id for job, _ in page if job.id not in matched]
            if stale:
                raise StaleDataError(
                    f"jobs {stale} changed since they were read: none of {len(page)} written"
                )
            for job, values in page:
                version = _version_read(job)
                for key, value in values.items():
                    set_committed_value(job, key, value)
                set_committed_value(job, "version", version + 1)


def _changes(job: Job) -> dict[str, Any] | None:
    """The job's new values, if it changed in TOGETHER's columns and nowhere else."""
    state = inspect(job)
    values: dict[str, Any] = {}
    for attribute in state.attrs:
        history = attribute.history
        if not history.has_changes():
            continue
        if attribute.key not in TOGETHER or not history.added:
            return None
        values[attribute.key] = history.added[0]
    if not values:
        return None
    values.setdefault("updated_at", utcnow())  # the column's onupdate, as SQLAlchemy's UPDATE
    return values


def _statement(keys: Sequence[str], jobs: Iterable[tuple[Job, dict[str, Any]]]) -> Any:
    """UPDATE jobs SET <keys> FROM (the rows) WHERE id and version match, RETURNING id."""
    table = cast(Table, Job.__table__)
    columns = table.c
    rows = union_all(
        *(
            select(
                literal(job.id, columns.id.type).label("id"),
                literal(_version_read(job), columns.version.type).label("version"),
                *(literal(values[key], columns[key].type).label(key) for key in keys),
            )
            for job, values in jobs
        )
    ).subquery("changed")
    return (
        update(table)
        .where(columns.id == rows.c.id, columns.version == rows.c.version)
        .values({key: rows.c[key] for key in keys} | {"version": columns.version + 1})
        .returning(columns.id)
    )


def _version_read(job: Job) -> int:
    """The version the job was loaded with (nothing but this module changes it)."""
    version: int = inspect(job).committed_state.get("version", job.version)
    return version
