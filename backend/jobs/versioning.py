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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import Table, Update, bindparam, inspect, select, union_all, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.exc import StaleDataError

from backend.db import utcnow
from backend.jobs.models import Job

# The columns written this way: plain values. A job with any other change (its spec, say)
# is left to SQLAlchemy's own UPDATE.
TOGETHER = frozenset(
    {
        "status",
        "reason",
        "updated_at",
        "started_at",
        "finished_at",
        "restart_count",
        "failure_count",
    }
)
LEAST = 2  # one job gains nothing from this
PAGE = 200  # jobs per statement (bound parameters stay well under SQLite's limit)

# A job to write: its id, the version it was read at, and its new values by column name.
VersionedRow = tuple[int, int, dict[str, Any]]
NO_JOB = -1  # an id and a version no job has (ids start at 1)


@dataclass(frozen=True)
class VersionedUpdate:
    """The statement that writes a page of jobs, and their values as its parameters."""

    statement: Update
    parameters: dict[str, Any]


def update_jobs_together(session: Session, _context: object, _instances: object) -> None:
    """Before a flush (backend.session_hooks, after models.tasks_change_their_job, whose
    marked jobs are written here too)."""
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
            rows = [(job.id, _version_read(job), values) for job, values in page]
            written = versioned_update(keys, rows)
            matched = set(connection.scalars(written.statement, written.parameters))
            raise_if_stale(rows, matched)
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


def versioned_update(keys: Sequence[str], rows: Sequence[VersionedRow]) -> VersionedUpdate:
    """UPDATE jobs SET <keys> FROM (the rows) WHERE id and version match, RETURNING id: each
    row is a job's id, the version it was read at and its new values (under `keys`). The
    statement and its parameters, to execute together."""
    keys = tuple(keys)
    size = _size_for(len(rows))
    parameters: dict[str, Any] = {}
    # Rows past the last job's repeat its values under an id no job has: they match nothing.
    padding = (NO_JOB, NO_JOB, rows[-1][2])
    for n, (job_id, version, values) in enumerate([*rows, *[padding] * (size - len(rows))]):
        parameters[f"row{n}_id"] = job_id
        parameters[f"row{n}_version"] = version
        for key in keys:
            parameters[f"row{n}_{key}"] = values[key]
    return VersionedUpdate(_statement(keys, size), parameters)


def _size_for(rows: int) -> int:
    """The statement's number of rows for this many: the next power of two, at most PAGE,
    so that a few statements serve every pass."""
    if not 0 < rows <= PAGE:
        raise ValueError(f"a versioned update writes 1 to {PAGE} jobs, not {rows}")
    return min(PAGE, 1 << (rows - 1).bit_length())


@lru_cache(maxsize=64)
def _statement(keys: tuple[str, ...], size: int) -> Update:
    """The UPDATE for `size` rows of these columns, with a bound parameter per value: built
    once. Built with each pass's values as literals, it would be annotated (SQLAlchemy's
    annotations of each SELECT's columns) and compiled afresh every time."""
    table = cast(Table, Job.__table__)
    columns = table.c

    def value(name: str, n: int) -> Any:
        column = columns[name]
        # Not "<column>_<n>": SQLAlchemy names its own anonymous parameters so.
        return bindparam(f"row{n}_{name}", type_=column.type).label(name)

    changed = union_all(
        *(
            select(value("id", n), value("version", n), *(value(key, n) for key in keys))
            for n in range(size)
        )
    ).subquery("changed")
    return (
        update(table)
        .where(columns.id == changed.c.id, columns.version == changed.c.version)
        .values({key: changed.c[key] for key in keys} | {"version": columns.version + 1})
        .returning(columns.id)
    )


def raise_if_stale(rows: Sequence[VersionedRow], matched: set[int]) -> None:
    """StaleDataError, as SQLAlchemy's own version check raises it, if a job the UPDATE
    was to write changed since it was read (the UPDATE matched fewer than all)."""
    stale = [job_id for job_id, _, _ in rows if job_id not in matched]
    if stale:
        raise StaleDataError(
            f"jobs {stale} changed since they were read: none of {len(rows)} written"
        )


def _version_read(job: Job) -> int:
    """The version the job was loaded with (nothing but this module changes it)."""
    version: int = inspect(job).committed_state.get("version", job.version)
    return version
