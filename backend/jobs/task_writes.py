"""Tasks written together: the many task rows one flush changes, one statement per shape.

A pass placing a hundred jobs changes a thousand tasks (host, port, GPUs, TF_CONFIG, status),
and one applying a thousand starts as many again (status, pid, start time). SQLAlchemy's unit
of work gathers and writes each object's changes one at a time: most of such a flush. Here,
before the flush, dirty tasks whose changes are all plain column values are written with one
executemany UPDATE per set of changed columns and marked clean, as the flush marks what it
wrote, which leaves the flush nothing to do for them; the cluster board is told of them here
(backend.jobs.cluster_changes), as the mapper's listener tells it of rows the flush writes.
Tasks carry no version of their own: the job of a changed task is updated in the same flush
(backend.jobs.models, whose hook runs first: backend.session_hooks), and the job's version
check is what catches a change made from a stale view.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

from sqlalchemy import Table, bindparam, inspect, update
from sqlalchemy.orm import InstanceState, Session
from sqlalchemy.orm.exc import StaleDataError

from backend.jobs import cluster_changes as changes
from backend.jobs.models import Task

# What may be written this way: every column but the key (each mapped under its column's
# name); a task with a relationship set is left to the ORM.
WRITTEN = frozenset(column.key for column in cast(Table, Task.__table__).columns) - {"id"}
LEAST = 2  # one task gains nothing from this


def update_tasks_together(session: Session, _context: object, _instances: object) -> None:
    shapes: dict[tuple[str, ...], list[tuple[Task, dict[str, Any]]]] = defaultdict(list)
    for task in session.dirty:
        if not isinstance(task, Task):
            continue
        state = inspect(task)
        # The attributes set since the task was loaded (their loaded values, by name).
        changed = state.committed_state
        if not changed or not changed.keys() <= WRITTEN:
            continue
        values = {key: state.dict[key] for key in changed}
        shapes[tuple(sorted(values))].append((task, values))
    if sum(len(tasks) for tasks in shapes.values()) < LEAST:
        return
    connection = session.connection()
    table = cast(Table, Task.__table__)
    for keys, tasks in shapes.items():
        statement = (
            update(table)
            .where(table.c.id == bindparam("task_id"))
            .values(
                {table.c[key]: bindparam(f"new_{key}", type_=table.c[key].type) for key in keys}
            )
        )
        rows = [
            {"task_id": task.id, **{f"new_{key}": value for key, value in values.items()}}
            for task, values in tasks
        ]
        result = connection.execute(statement, rows)
        if connection.dialect.supports_sane_multi_rowcount and result.rowcount != len(rows):
            raise StaleDataError(
                f"{len(rows) - result.rowcount} of {len(rows)} tasks were deleted while written"
            )
        # Written: the flush has nothing left of them. Marked clean as the flush marks what
        # it wrote (without the flush's unit of work, costly over many tasks), and the
        # cluster board told of them, as the mapper's listener would have.
        # SQLAlchemy's one private call here: its public API (set_committed_value) cancels
        # the changes but leaves each task dirty, and the flush would walk them all again.
        InstanceState._commit_all_states(
            ((inspect(task), task.__dict__) for task, _ in tasks), session.identity_map
        )
        changes.note_tasks(session, (changes.task_row(task) for task, _ in tasks))
