"""Metric points as stored: one row per scalar, idempotent per (job, task, attempt, seq)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Double,
    Float,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base

BigId = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrements INTEGER only


class MetricPoint(Base):
    __tablename__ = "metric_points"
    __table_args__ = (
        # A resent batch carries the same sequence numbers and so inserts nothing new.
        UniqueConstraint("job_id", "task", "attempt", "seq"),
        Index("ix_metric_points_job_name_step", "job_id", "name", "step"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # No foreign key: checking it for every row is a large share of PostgreSQL's insert time,
    # and the runtime channel already checks the job and task once per connection.
    job_id: Mapped[int] = mapped_column(Integer)
    task: Mapped[str] = mapped_column(String(32))
    attempt: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(128))
    step: Mapped[int] = mapped_column(BigInteger)
    # NULL stands for NaN: SQLite cannot store NaN in a REAL column, and NaN is worth keeping.
    value: Mapped[float | None] = mapped_column(Float)
    # Seconds since the epoch, as the training process saw them (a float, like TensorBoard's).
    wall_time: Mapped[float] = mapped_column(Double)
