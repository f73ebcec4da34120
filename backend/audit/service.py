"""Recording changes and reading them back. Keyword-only; flush, never commit: an entry is
written in the same transaction as the change it records, so a change that fails or rolls
back leaves no entry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol, TypeVar, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from backend.audit.actions import AuditAction
from backend.audit.models import AuditEntry
from backend.auth import Principal
from backend.jobs.models import Job, JobEvent


class InTransaction(Protocol):
    """What `audited` needs of a controller change's transaction (scheduling.Transaction),
    named here so that the audit trail stays below the controller."""

    @property
    def session(self) -> AsyncSession: ...


T = TypeVar("T")
Tx = TypeVar("Tx", bound=InTransaction)
Change = Callable[[Tx], Awaitable[T]]  # as Controller.apply takes it

# session.info key: who the job events this session writes are by (set by `record`).
ACTOR = "strata.actor"


def name_the_actor(session: Session, _context: object, _instances: object) -> None:
    """Every job event a session writes after `record` names the same actor, however deep in
    the services it was made: no service has to be told who is calling."""
    actor = session.info.get(ACTOR)
    if actor is None:
        return
    for obj in session.new:
        if isinstance(obj, JobEvent) and obj.actor is None:
            obj.actor = actor


def name_actor(*, session: AsyncSession, principal: Principal) -> None:
    """Have the job events this transaction records from now on name `principal`."""
    session.info[ACTOR] = principal.label


async def record(
    *,
    session: AsyncSession,
    principal: Principal,
    source: str | None,
    action: AuditAction,
    project_id: int | None = None,
    job_id: int | None = None,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """Record a change made by `principal` from `source`; the job events this transaction
    records from now on name the same actor."""
    name_actor(session=session, principal=principal)
    entry = AuditEntry(
        **entry_values(
            principal=principal,
            source=source,
            action=action,
            project_id=project_id,
            job_id=job_id,
            target=target,
            detail=detail,
        )
    )
    session.add(entry)
    await session.flush()
    return entry


def entry_values(
    *,
    principal: Principal,
    source: str | None,
    action: AuditAction,
    project_id: int | None = None,
    job_id: int | None = None,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An entry's column values (for many inserted in one statement: `insert_entries`)."""
    return {
        "actor": principal.label,
        "user_id": principal.user_id,
        "token_id": principal.token_id,
        "action": action.value,
        "project_id": project_id,
        "job_id": job_id,
        "target": target,
        "detail": detail or {},
        "source": source,
    }


async def insert_entries(*, session: AsyncSession, entries: list[dict[str, Any]]) -> None:
    """Entries (`entry_values`) in one many-row INSERT, as rows rather than ORM objects."""
    if entries:
        await session.execute(insert(cast(Table, AuditEntry.__table__)), entries)


async def list_entries(
    *,
    session: AsyncSession,
    project_ids: Collection[int] | None,
    project_id: int | None = None,
    job_id: int | None = None,
    actor: str | None = None,
    action: AuditAction | None = None,
    before: int | None = None,
    limit: int,
) -> list[AuditEntry]:
    """Entries newest first, matching every filter given. `project_ids` is what the reader
    may see: None for everything, else only entries of those projects."""
    filters: list[ColumnElement[bool]] = []
    if project_ids is not None:
        filters.append(AuditEntry.project_id.in_(list(project_ids)))
    if project_id is not None:
        filters.append(AuditEntry.project_id == project_id)
    if job_id is not None:
        filters.append(AuditEntry.job_id == job_id)
    if actor is not None:
        filters.append(AuditEntry.actor == actor)
    if action is not None:
        filters.append(AuditEntry.action == action.value)
    if before is not None:
        filters.append(AuditEntry.id < before)
    statement = select(AuditEntry).where(*filters).order_by(AuditEntry.id.desc()).limit(limit)
    return list((await session.execute(statement)).scalars())


async def record_job_change(
    *,
    session: AsyncSession,
    principal: Principal,
    source: str | None,
    action: AuditAction,
    job_id: int,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """`record` for a change to one job, in the job's project. A job that does not exist is
    recorded too, but the change then fails (404) and takes the entry with it."""
    project_id = await session.scalar(select(Job.project_id).where(Job.id == job_id))
    return await record(
        session=session,
        principal=principal,
        source=source,
        action=action,
        project_id=project_id,
        job_id=job_id,
        target=target,
        detail=detail,
    )


def audited(
    change: Change[Tx, T],
    *,
    principal: Principal,
    source: str | None,
    action: AuditAction,
    job_id: int,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> Change[Tx, T]:
    """A controller change (Controller.apply) that first records itself in the audit trail,
    in its own transaction: its job events name the caller, and its failure leaves nothing."""

    async def change_recorded(tx: Tx) -> T:
        await record_job_change(
            session=tx.session,
            principal=principal,
            source=source,
            action=action,
            job_id=job_id,
            target=target,
            detail=detail,
        )
        return await change(tx)

    return change_recorded
