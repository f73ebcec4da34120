"""What each transaction changed of the cluster view, told to the cluster board once it has
committed.

Mapper listeners note, row by row as a flush writes them, each task as written (where it is,
its status, its port and GPUs), each new job's name, and the hosts whose row or devices were
written; a session listener hands them to the board after commit (backend.cluster.board), which
applies the tasks in memory and reads again only those hosts. Statements that bypass the
ORM's unit of work name their hosts themselves (`note_hosts`, `note_heartbeats`). The
listeners are registered by backend.session_hooks.

A rollback discards what its transaction noted: nothing of it is in the database. A savepoint
rolled back inside a transaction turns the tasks noted so far into hosts to read again once
the transaction commits, since some of them may have been undone and others not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapper, Session, SessionTransaction, object_session

from backend.hosts.models import Device, Host
from backend.jobs.models import Job, Task
from backend.jobs.states import TaskStatus

BOARD = "strata.cluster_board"
PENDING = "strata.cluster_changes"


@dataclass(slots=True)
class TaskRow:
    """What the cluster view shows of a task, as a flush wrote it or as it was read."""

    task_id: int
    host_id: int | None
    job_id: int
    role: str
    index: int
    status: TaskStatus
    port: int | None
    gpus: list[int]


@dataclass
class ClusterChanges:
    hosts: set[int] = field(default_factory=set)  # to read again: their row or devices changed
    tasks: dict[int, TaskRow] = field(default_factory=dict)  # by task id, the last written
    job_names: dict[int, str] = field(default_factory=dict)  # of jobs inserted
    heartbeats: bool = False  # hosts' heartbeat times were written
    # Tasks whose hosts, the one each was on and the one it is on, are to be read again.
    reread_tasks: set[int] = field(default_factory=set)

    def merge(self, other: ClusterChanges) -> None:
        self.hosts |= other.hosts
        self.tasks.update(other.tasks)
        self.job_names.update(other.job_names)
        self.heartbeats = self.heartbeats or other.heartbeats
        self.reread_tasks |= other.reread_tasks


class ChangeListener(Protocol):
    def changed(self, changes: ClusterChanges) -> None: ...


def _pending(session: AsyncSession | Session) -> ClusterChanges:
    pending: ClusterChanges = session.info.setdefault(PENDING, ClusterChanges())
    return pending


def note_hosts(session: AsyncSession | Session, host_ids: Iterable[int]) -> None:
    """Hosts written by a statement the ORM does not track (a bulk UPDATE or DELETE)."""
    _pending(session).hosts.update(host_ids)


def task_row(task: Task) -> TaskRow:
    return TaskRow(
        task.id,
        task.host_id,
        task.job_id,
        task.role,
        task.index,
        task.status,
        task.port,
        list(task.gpu_indices or []),
    )


def note_tasks(session: AsyncSession | Session, rows: Iterable[TaskRow]) -> None:
    """Tasks written by a statement the ORM does not track, as written."""
    if BOARD in session.info:
        _pending(session).tasks.update((row.task_id, row) for row in rows)


def note_job_names(session: AsyncSession | Session, names: dict[int, str]) -> None:
    """Jobs inserted by a statement the ORM does not track, by id."""
    if BOARD in session.info:
        _pending(session).job_names.update(names)


def note_heartbeats(session: AsyncSession | Session) -> None:
    """Hosts' last heartbeat times were written (only their ages change in the view)."""
    _pending(session).heartbeats = True


def note_written(_mapper: Mapper[Any], _connection: Connection, target: object) -> None:
    """Called by the flush for each row of a task, job, device or host it writes."""
    session = object_session(target)
    if session is None or BOARD not in session.info:
        return
    pending = _pending(session)
    if isinstance(target, Task):
        pending.tasks[target.id] = task_row(target)
    elif isinstance(target, Job):
        pending.job_names[target.id] = target.name
    elif isinstance(target, Device):
        pending.hosts.add(target.host_id)
    elif isinstance(target, Host):
        pending.hosts.add(target.id)


def note_updated(mapper: Mapper[Any], connection: Connection, target: object) -> None:
    """A flush calls after_update for every object set dirty, also with nothing changed (a
    host's status set online again): a host read again for nothing costs a read, so only net
    changes count. (Tasks are compared by the board, more cheaply.)"""
    session = object_session(target)
    if isinstance(target, Task) or (
        session is not None and session.is_modified(target, include_collections=False)
    ):
        note_written(mapper, connection, target)


def hand_over(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: the transaction around it has yet to commit
    changes: ClusterChanges | None = session.info.pop(PENDING, None)
    board: ChangeListener | None = session.info.get(BOARD)
    if board is not None and changes is not None:
        board.changed(changes)


def rolled_back(session: Session, previous: SessionTransaction) -> None:
    if not previous.nested:
        session.info.pop(PENDING, None)
        return
    pending: ClusterChanges | None = session.info.get(PENDING)
    if pending is not None:
        pending.hosts.update(t.host_id for t in pending.tasks.values() if t.host_id is not None)
        pending.reread_tasks.update(pending.tasks)
        pending.tasks.clear()
