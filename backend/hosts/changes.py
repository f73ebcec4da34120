"""Which hosts each transaction changed, told to the cluster board once it has ended.

A session listener notes the hosts whose row, devices or placed tasks each flush wrote (a task
moved off a host names both), and hands them to the board (backend.hosts.board) after commit,
so that the board reads again only those. Statements that bypass the ORM's unit of work name
their hosts themselves (`note_hosts`, `note_heartbeats`). A rollback hands them over too:
reading a host again that did not change costs a read, missing one would show it stale.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Protocol

from sqlalchemy import event, inspect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

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


def _hosts_written(session: Session) -> set[int]:
    hosts: set[int | None] = set()
    for obj in chain(session.new, session.dirty, session.deleted):
        if isinstance(obj, Task):
            # Where it was and where it is: a task moved or released changes both hosts.
            hosts.update(inspect(obj).attrs.host_id.history.sum())
        elif isinstance(obj, Device):
            hosts.add(obj.host_id)
        elif isinstance(obj, Host):
            hosts.add(obj.id)
    return {host for host in hosts if host is not None}  # None: a task placed nowhere


@event.listens_for(PublishingSession, "after_flush")
def _collect(session: Session, _context: object) -> None:
    if BOARD in session.info:
        note_hosts(session, _hosts_written(session))


@event.listens_for(PublishingSession, "after_commit")
@event.listens_for(PublishingSession, "after_rollback")
def _hand_over(session: Session) -> None:
    hosts: set[int] = session.info.pop(CHANGED_HOSTS, set())
    heartbeats: bool = session.info.pop(HEARTBEATS, False)
    board: ChangeListener | None = session.info.get(BOARD)
    if board is not None and (hosts or heartbeats):
        board.changed(hosts, heartbeats)
