"""Sweeps and their trials as stored. Optuna keeps its own study in its own tables
(backend.sweeps.study); a trial row ties its Optuna trial number to the job that runs it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Enum, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from backend.db import Base, UTCDateTime, utcnow
from backend.sweeps.spec import SweepSpec
from backend.sweeps.states import SweepStatus, TrialStatus


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[SweepStatus] = mapped_column(
        Enum(SweepStatus, native_enum=False, length=16, validate_strings=True), index=True
    )
    reason: Mapped[str | None] = mapped_column(Text)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    submitted_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    trials: Mapped[list[SweepTrial]] = relationship(
        back_populates="sweep", cascade="all, delete-orphan", order_by="SweepTrial.number"
    )

    @property
    def sweep_spec(self) -> SweepSpec:
        return SweepSpec.model_validate(self.spec, strict=False)

    @property
    def study_name(self) -> str:
        """Its Optuna study's name (one study per sweep)."""
        return f"strata-sweep-{self.id}"

    @property
    def tag(self) -> str:
        """The tag its trials' jobs carry (to list them with GET /jobs?tag=...)."""
        return f"sweep-{self.id}"


class SweepTrial(Base):
    __tablename__ = "sweep_trials"
    __table_args__ = (UniqueConstraint("sweep_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)  # Optuna's trial number in the sweep's study
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), unique=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[TrialStatus] = mapped_column(
        Enum(TrialStatus, native_enum=False, length=16, validate_strings=True)
    )
    # The objective's last value, once the trial ended with one.
    value: Mapped[float | None] = mapped_column(Float)
    # The intermediate values reported to the pruner so far: [[resource, value], ...].
    curve: Mapped[list[list[float]]] = mapped_column(JSON, default=list)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    sweep: Mapped[Sweep] = relationship(back_populates="trials")
