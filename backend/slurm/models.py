"""What the server records about each job's Slurm job, before and after sbatch runs."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Enum, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, UTCDateTime, utcnow


class Phase(StrEnum):
    # Recorded, and sbatch may or may not have run: before submitting (again), the queue is
    # searched for the record's name and marker, so that a crash never submits twice.
    recorded = "recorded"
    submitted = "submitted"  # Slurm gave it an id; squeue (then sacct) says what it does
    ended = "ended"  # Slurm is done with it (or refused it): nothing more to watch


class SlurmJob(Base):
    """One Strata job's Slurm job."""

    __tablename__ = "slurm_jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), unique=True, index=True
    )
    name: Mapped[str] = mapped_column(String(64))  # Slurm's --job-name: <prefix>-<job id>
    marker: Mapped[str] = mapped_column(String(128))  # Slurm's --comment: unique per record
    phase: Mapped[Phase] = mapped_column(
        Enum(Phase, native_enum=False, length=16, validate_strings=True), index=True
    )
    slurm_job_id: Mapped[str | None] = mapped_column(String(32))
    slurm_state: Mapped[str | None] = mapped_column(String(32))  # PENDING, RUNNING, ...
    slurm_reason: Mapped[str | None] = mapped_column(Text)  # Resources, Priority, None, ...
    nodes: Mapped[str | None] = mapped_column(String(1024))  # n[1-2]
    submit_tries: Mapped[int] = mapped_column(Integer, default=0)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cancel_sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
