"""One row per change made through the API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column, orm_insert_sentinel

from backend.db import Base, UTCDateTime, utcnow


class AuditEntry(Base):
    __tablename__ = "audit_entries"
    # The readers' queries: newest first, by project, by job.
    __table_args__ = (
        Index("ix_audit_entries_project_id_id", "project_id", "id"),
        Index("ix_audit_entries_job_id_id", "job_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    actor: Mapped[str] = mapped_column(String(128))  # Principal.label: "alice", "admin token 3"
    # Ids without foreign keys: a record outlives the user, token, project or job it names.
    user_id: Mapped[int | None] = mapped_column(Integer)
    token_id: Mapped[int | None] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(32), index=True)  # an AuditAction
    project_id: Mapped[int | None] = mapped_column(Integer)
    job_id: Mapped[int | None] = mapped_column(Integer)
    target: Mapped[str | None] = mapped_column(String(256))  # "worker:1", "token 4", "alice"
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    source: Mapped[str | None] = mapped_column(String(64))  # the client's address
    # Orders the ids SQLite returns for a many-row INSERT (submissions written together).
    _sentinel: Mapped[int | None] = orm_insert_sentinel()
