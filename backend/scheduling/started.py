"""Applying agents' reports that they started task attempts, as rows and statements.

A thousand agents report ten thousand starts within seconds. Through ORM objects (jobs and
their tasks loaded, changed, flushed) a thousand jobs' starts cost 2.5 s of the controller's
lock; here the same is a few reads of plain rows and a few many-row writes. The rules are
the unit of work's: each job whose tasks change is written with its version check (a change
made from a stale view fails with StaleDataError), the events are published after commit,
the cluster board is told what was written, and objects the session already holds are kept
as written.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.orm.util import identity_key

from agents.protocol import TaskKey
from agents.vocabulary import Role, format_task_name
from backend import security
from backend.db import in_pages, utcnow
from backend.jobs.cluster_changes import TaskRow, note_tasks
from backend.jobs.events import EventKind
from backend.jobs.models import Job, Task
from backend.jobs.states import JobStatus, TaskStatus
from backend.jobs.versioning import PAGE, VersionedRow, raise_if_stale, versioned_update
from backend.scheduling.cluster import StartMode
from backend.scheduling.lifecycle import StatusChange, StoredEvent, record_events, status_change
from backend.scheduling.task_events import NamedHost, key_text, wanted_on
from backend.scheduling.transaction import Transaction

ALL_RUNNING = "all tasks are running"  # the reason a job becomes running for


@dataclass(slots=True)
class _Job:
    id: int
    status: JobStatus
    version: int
    started_at: datetime | None


@dataclass(slots=True)
class _Task:
    id: int
    job_id: int
    role: str
    index: int
    attempt: int
    status: TaskStatus
    host_id: int | None
    port: int | None
    gpu_indices: list[int]

    @property
    def name(self) -> str:
        return format_task_name(self.role, self.index)


async def mark_started_many(
    *,
    tx: Transaction,
    starts: Sequence[tuple[NamedHost, TaskKey, int]],
    modes: Mapping[TaskKey, StartMode] | None = None,
) -> None:
    """Apply agents' reports that they started these attempts (warm or cold, where `modes`
    says): a task waiting for its start runs, and a job whose training tasks all run is
    running. An attempt that should not run there is told to stop."""
    session = tx.session
    await session.flush()  # what this transaction changed through objects is in the rows
    jobs, by_job = await _load(session, sorted({key.job_id for _, key, _ in starts}))
    tasks = {(t.job_id, t.name): t for job_tasks in by_job.values() for t in job_tasks}
    now = utcnow()
    started: dict[int, tuple[_Task, int]] = {}  # by task id: the task, its pid
    events: list[StoredEvent] = []
    for host, key, pid in starts:
        job = jobs.get(key.job_id)
        task = tasks.get((key.job_id, key.task))
        if not wanted_on(task, job, host, key):
            if task is None or task.host_id not in (None, host.id):
                # Not a late start of an attempt that was stopped: another host's task, or none.
                security.refused(f"agent {host.name}", f"task_started for {key_text(key)}")
            tx.stop(host.name, key, "this attempt should not run")
            continue
        assert task is not None and job is not None
        if task.status is not TaskStatus.scheduled:
            continue  # started already (a report sent again after a reconnect)
        task.status = TaskStatus.running
        started[task.id] = (task, pid)
        events.append(_started_event(task, host, pid, (modes or {}).get(key), now))
    if not started:
        return
    changed_jobs = {task.job_id for task, _ in started.values()}
    # Jobs whose training tasks all run now: their status changes as every job's does.
    running = {
        job.id: status_change(
            job_id=job.id,
            current=job.status,
            started_at=job.started_at,
            to=JobStatus.running,
            reason=ALL_RUNNING,
            now=now,
        )
        for job_id in sorted(changed_jobs)
        if (job := jobs[job_id]).status in (JobStatus.scheduled, JobStatus.restarting)
        and all(t.status is TaskStatus.running for t in by_job[job_id] if t.role != Role.evaluator)
    }
    await _write_jobs(session, jobs, changed_jobs, running, now)
    events += [change.event for change in running.values()]
    await _write_tasks(session, started, now)
    await record_events(session=session, events=events)
    _keep_objects(session, jobs, changed_jobs, running, started, now)


async def _load(
    session: AsyncSession, job_ids: list[int]
) -> tuple[dict[int, _Job], dict[int, list[_Task]]]:
    """The jobs, and the tasks of each, as plain rows."""
    jobs: dict[int, _Job] = {}
    tasks: dict[int, list[_Task]] = defaultdict(list)
    for page in in_pages(job_ids):
        for row in await session.execute(
            select(Job.id, Job.status, Job.version, Job.started_at).where(Job.id.in_(page))
        ):
            jobs[row.id] = _Job(*row)
        for task_row in await session.execute(
            select(
                Task.id,
                Task.job_id,
                Task.role,
                Task.index,
                Task.attempt,
                Task.status,
                Task.host_id,
                Task.port,
                Task.gpu_indices,
            ).where(Task.job_id.in_(page))
        ):
            tasks[task_row.job_id].append(_Task(*task_row))
    return jobs, tasks


def _started_event(
    task: _Task, host: NamedHost, pid: int, mode: StartMode | None, now: datetime
) -> StoredEvent:
    data: dict[str, Any] = {"to": "running", "attempt": task.attempt, "pid": pid, "host": host.name}
    if mode is not None:
        data.update(warm=mode.warm, cold_reason=mode.cold_reason)
    words = mode.words() if mode is not None else "started"
    return StoredEvent(
        job_id=task.job_id,
        kind=EventKind.task_status,
        task=task.name,
        message=f"{task.name} {words} on {host.name} (pid {pid})",
        data=data,
        at=now,
    )


async def _write_jobs(
    session: AsyncSession,
    jobs: dict[int, _Job],
    changed: set[int],
    running: dict[int, StatusChange],
    now: datetime,
) -> None:
    """Every job whose tasks changed, with its version check; those now running with their
    change of status (lifecycle.status_change)."""
    shapes: dict[tuple[str, ...], list[VersionedRow]] = defaultdict(list)
    for job_id in sorted(changed):
        job = jobs[job_id]
        values: dict[str, Any] = {"updated_at": now}
        if job_id in running:
            values |= running[job_id].values
        shapes[tuple(sorted(values))].append((job.id, job.version, values))
    for keys, rows in shapes.items():
        for first in range(0, len(rows), PAGE):
            page = rows[first : first + PAGE]
            written = versioned_update(keys, page)
            matched = await session.scalars(written.statement, written.parameters)
            raise_if_stale(page, set(matched))


async def _write_tasks(
    session: AsyncSession, started: dict[int, tuple[_Task, int]], now: datetime
) -> None:
    table = cast(Table, Task.__table__)
    statement = (
        update(table)
        .where(table.c.id == bindparam("task_id"), table.c.status == TaskStatus.scheduled)
        .values(status=TaskStatus.running, pid=bindparam("new_pid"), started_at=now)
    )
    rows = [{"task_id": task_id, "new_pid": pid} for task_id, (_, pid) in started.items()]
    result = cast(CursorResult[Any], await session.execute(statement, rows))
    # (The jobs' version check above already caught a task changed under this pass.)
    dialect = (await session.connection()).dialect
    if dialect.supports_sane_multi_rowcount and result.rowcount != len(rows):
        raise StaleDataError(f"{len(rows) - result.rowcount} of {len(rows)} tasks changed")
    note_tasks(
        session,
        (
            TaskRow(t.id, t.host_id, t.job_id, t.role, t.index, t.status, t.port, t.gpu_indices)
            for t, _ in started.values()
        ),
    )


def _keep_objects(
    session: AsyncSession,
    jobs: dict[int, _Job],
    changed: set[int],
    running: dict[int, StatusChange],
    started: dict[int, tuple[_Task, int]],
    now: datetime,
) -> None:
    """Objects of these rows the session holds already are set to what was written, as
    loaded (not as changes to write again), so that the transaction goes on from them."""
    held = session.sync_session.identity_map
    for job_id in changed:
        job = held.get(identity_key(Job, job_id))
        if job is None:
            continue
        assert isinstance(job, Job)
        set_committed_value(job, "version", jobs[job_id].version + 1)
        set_committed_value(job, "updated_at", now)
        if job_id in running:
            for column, value in running[job_id].values.items():
                set_committed_value(job, column, value)
    for task_id, (_, pid) in started.items():
        task = held.get(identity_key(Task, task_id))
        if task is None:
            continue
        assert isinstance(task, Task)
        set_committed_value(task, "status", TaskStatus.running)
        set_committed_value(task, "pid", pid)
        set_committed_value(task, "started_at", now)
