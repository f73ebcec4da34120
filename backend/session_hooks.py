"""Every SQLAlchemy listener of the server's sessions and models, registered here in one
explicit order.

Each listener lives with its concern (job versions, task writes, the audit actor, event
publishing, the cluster board); this module only wires them up. SQLAlchemy calls the
listeners of one event in the order they were registered, so that order is HOOKS' order,
not the order in which modules happened to be imported. Whatever opens sessions calls
`install()` first: the server (backend.app), the CLI commands that open sessions themselves
(backend.cli.server) and the tests (tests/conftest.py). The SQLite pragmas are a listener
of each engine, registered as it is made (backend.db.create_engine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from backend.audit import service as audit
from backend.db import PublishingSession
from backend.hosts.models import Device, Host
from backend.jobs import cluster_changes as changes
from backend.jobs import models, task_writes, versioning
from backend.jobs.models import Job, Task
from backend.streams import publishing


@dataclass(frozen=True)
class Hook:
    """A listener of one event of a session class or a mapped class."""

    target: type[Any]
    event: str
    listener: Callable[..., None]


HOOKS: tuple[Hook, ...] = (
    # Before a flush. First: a changed task marks its job changed, so that the job is
    # written with its version check (by the hooks below or by the flush itself).
    Hook(Session, "before_flush", models.tasks_change_their_job),
    # Tasks and jobs written together: each only its own table, both after the marking above.
    Hook(Session, "before_flush", task_writes.update_tasks_together),
    Hook(Session, "before_flush", versioning.update_jobs_together),
    # Job events about to be inserted name the session's actor.
    Hook(Session, "before_flush", audit.name_the_actor),
    # Row by row as a flush writes them, what the cluster board is told (rather than from
    # session.dirty after it, a set built by comparing every modified object's attributes).
    Hook(Task, "after_insert", changes.note_written),  # tasks are deleted only with their job
    Hook(Task, "after_update", changes.note_updated),
    Hook(Job, "after_insert", changes.note_written),  # a job's name never changes
    Hook(Device, "after_insert", changes.note_written),
    Hook(Device, "after_delete", changes.note_written),
    Hook(Device, "after_update", changes.note_updated),
    Hook(Host, "after_insert", changes.note_written),
    Hook(Host, "after_delete", changes.note_written),
    Hook(Host, "after_update", changes.note_updated),
    # The server's sessions: job events and board changes kept until their transaction ends.
    Hook(PublishingSession, "after_flush", publishing.collect),
    Hook(PublishingSession, "after_transaction_create", publishing.savepoint_begun),
    # After commit: the job events published, the board told (each independent of the other).
    Hook(PublishingSession, "after_commit", publishing.publish),
    Hook(PublishingSession, "after_commit", changes.hand_over),
    Hook(PublishingSession, "after_rollback", publishing.discard),
    Hook(PublishingSession, "after_soft_rollback", changes.rolled_back),
    Hook(PublishingSession, "after_transaction_end", publishing.transaction_ended),
)


def install() -> None:
    """Register every hook in HOOKS' order. Registering again is harmless: a hook already
    registered is left where it is, never added twice."""
    for hook in HOOKS:
        if not event.contains(hook.target, hook.event, hook.listener):
            event.listen(hook.target, hook.event, hook.listener)
