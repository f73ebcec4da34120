"""Which hosts each transaction changed, told to the cluster board once it has ended.

Mapper listeners note the hosts whose row, devices or placed tasks each flush writes (a task
moved off a host names both), and a session listener hands them to the board after commit
(backend.hosts.board), which reads again only those. Statements that bypass the ORM's unit of
work name their hosts themselves (`note_hosts`, `note_heartbeats`). A rollback hands them over
too: reading a host again that did not change costs a read, missing one would show it stale.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, cast

from sqlalchemy import Connection, event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapper, Session, object_session
from sqlalchemy.orm.attributes import get_history

from backend.hosts.models import Device, Host
from backend.jobs.models import Task
from backend.streams.events import PublishingSession

BOARD = "strata.cluster_board"
CHANGED_HOSTS = "strata.changed_hosts"
HEARTBEATS = "strata.heartbeats_written"


class ChangeListener(Protocol):
    def changed(self, hosts: set[int], heartbeats: bool) -> None: ...


def note_hosts(session: AsyncSession | Session, host_ids: Iterable[int]) -> None:
    """Hosts written by a statement the ORM does not track (a bulk UPDATE or DELETE)."""
    session.info.setdefault(CHANGED_HOSTS, set()).update(host_ids)


def note_heartbeats(session: AsyncSession | Session) -> None:
    """Hosts' last heartbeat times were written (only their ages change in the view)."""
    session.info[HEARTBEATS] = True


def _note_written(_mapper: Mapper[Any], _connection: Connection, target: object) -> None:
    """Called by the flush for each row of a task, device or host it writes."""
    session = object_session(target)
    if session is None or BOARD not in session.info:
        return
    if isinstance(target, Task):
        # Where it was and where it is: a task moved or released changes both hosts.
        written = [h for h in get_history(target, "host_id").sum() if h is not None]
    elif isinstance(target, Device):
        written = [target.host_id]
    else:
        written = [cast(Host, target).id]
    note_hosts(session, written)


# Row by row from the flush, rather than from session.dirty after it: that set is built by
# comparing every modified object's attributes, which cost a placement pass several percent.
for model in (Task, Device, Host):
    for when in ("after_insert", "after_update", "after_delete"):
        event.listen(model, when, _note_written)


@event.listens_for(PublishingSession, "after_commit")
@event.listens_for(PublishingSession, "after_rollback")
def _hand_over(session: Session) -> None:
    hosts: set[int] = session.info.pop(CHANGED_HOSTS, set())
    heartbeats: bool = session.info.pop(HEARTBEATS, False)
    board: ChangeListener | None = session.info.get(BOARD)
    if board is not None and (hosts or heartbeats):
        board.changed(hosts, heartbeats)
