"""Jobs, their tasks, the events that record what happened to them, and checkpoints."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Enum,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Mapped, Session, mapped_column, orm_insert_sentinel, relationship
from sqlalchemy.types import TypeDecorator

from agents.protocol import TaskKey
from agents.vocabulary import Role, format_task_name
from backend.db import Base, UTCDateTime, utcnow
from backend.jobs.spec import JobSpec, stored_spec
from backend.jobs.states import JobStatus, TaskStatus

if TYPE_CHECKING:
    from backend.hosts.models import Host


class RoleColumn(TypeDecorator[Role]):
    """A task's role: stored as its plain string (a VARCHAR, as the schema has it), read as
    the Role; a string that names no role is refused before it is written."""

    impl = String(16)
    cache_ok = True

    def process_bind_param(self, value: Role | str | None, dialect: Dialect) -> str | None:
        return None if value is None else Role(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> Role | None:
        # A lookup rather than Role(value): every task row a pass reads comes through here.
        return None if value is None else _ROLES.get(value) or Role(value)


_ROLES = {role.value: role for role in Role}


# Where a Job keeps its validated spec: an instance attribute SQLAlchemy does not map.
_JOB_SPEC = "_strata_job_spec"


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    strategy: Mapped[str] = mapped_column(String(32))
    status: Mapped[JobStatus] = mapped_column(
        Enum(JobStatus, native_enum=False, length=16, validate_strings=True), index=True
    )
    reason: Mapped[str | None] = mapped_column(Text)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # Every restart (by policy, by request, after a Slurm requeue) counts in restart_count;
    # only those after a failure count in failure_count, the restart policy's budget.
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    failure_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Optimistic concurrency: every UPDATE of a job (and so every change to its tasks, see
    # backend.jobs.versioning) names the version it read, and fails if the row changed since.
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    # The id of the job's Slurm job once sbatch gave one (spec.slurm; backend.slurm).
    slurm_job_id: Mapped[str | None] = mapped_column(String(32))
    # The project the job belongs to: who may see and control it (backend.teams.access).
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    # Who submitted it, as Principal.label names them ("alice", "admin token ...").
    submitted_by: Mapped[str | None] = mapped_column(String(128))
    _sentinel: Mapped[int | None] = orm_insert_sentinel()  # as Task's: submissions batched

    __mapper_args__ = {"version_id_col": version}

    # Tasks are created chief, workers, ps, evaluator; id order is that display order.
    tasks: Mapped[list[Task]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="Task.id"
    )
    events: Mapped[list[JobEvent]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="JobEvent.id"
    )

    @property
    def job_spec(self) -> JobSpec:
        """The spec as the model, validated once per loaded value: `spec` holds its JSON
        (stored as it always was), and every reader of a job's spec reads it here."""
        stored = self.spec
        # Kept beside the document it came from: a reloaded or reassigned `spec` is read anew.
        cached: tuple[dict[str, Any], JobSpec] | None = self.__dict__.get(_JOB_SPEC)
        if cached is None or cached[0] is not stored:
            cached = (stored, stored_spec(stored))
            self.__dict__[_JOB_SPEC] = cached
        return cached[1]


class Task(Base):
    """One process of a job: a role and an index, on a host and port once placed."""

    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("job_id", "role", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    role: Mapped[Role] = mapped_column(RoleColumn)
    index: Mapped[int] = mapped_column(Integer)
    status: Mapped[TaskStatus] = mapped_column(
        Enum(TaskStatus, native_enum=False, length=16, validate_strings=True), index=True
    )
    host_id: Mapped[int | None] = mapped_column(
        ForeignKey("hosts.id", ondelete="SET NULL"), index=True
    )
    port: Mapped[int | None] = mapped_column(Integer)
    gpu_indices: Mapped[list[int]] = mapped_column(JSON, default=list)
    tf_config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    pid: Mapped[int | None] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # The attempts that followed a failure (of this task, or of the job): the per-task
    # budget of the restart policy. A requested restart adds an attempt but no failure.
    failure_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    exit_code: Mapped[int | None] = mapped_column(Integer)
    # A restarted attempt is not started before this (the restart policy's backoff).
    restart_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Orders the ids SQLite returns for a many-row INSERT, so that a job's ten tasks are
    # inserted in one statement rather than ten (PostgreSQL needs no such column).
    _sentinel: Mapped[int | None] = orm_insert_sentinel()

    job: Mapped[Job] = relationship(back_populates="tasks")
    host: Mapped[Host | None] = relationship(lazy="joined")

    @property
    def name(self) -> str:
        return format_task_name(self.role, self.index)

    @property
    def key(self) -> TaskKey:
        """Its current attempt, as agents name it."""
        return TaskKey(job_id=self.job_id, task=self.name, attempt=self.attempt)


class JobEvent(Base):
    """Something that happened to a job: a state change, a restart, an operator's request."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))  # an EventKind (backend/jobs/events.py)
    task: Mapped[str | None] = mapped_column(String(32))  # "worker:1" when about one task
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Who caused it through the API (Principal.label); null for what the system did itself.
    actor: Mapped[str | None] = mapped_column(String(128))
    _sentinel: Mapped[int | None] = orm_insert_sentinel()  # as Task's

    job: Mapped[Job] = relationship(back_populates="events")


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("job_id", "path"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(String(1024))
    epoch: Mapped[int | None] = mapped_column(Integer)
    step: Mapped[int | None] = mapped_column(BigInteger)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # epoch | time | command | end | export
    trigger: Mapped[str | None] = mapped_column(String(16))
    # tf_checkpoint | saved_model | keras (rows from before the column: tf_checkpoint)
    format: Mapped[str] = mapped_column(
        String(16), default="tf_checkpoint", server_default="tf_checkpoint"
    )
    keras: Mapped[str | None] = mapped_column(String(16))  # tf_keras | keras3; null: unknown
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class JobClient(Base):
    """The client coordinator of a job whose spec says coordinator: client (runtime.connect):
    one row per job, the attachment now or the last one."""

    __tablename__ = "job_clients"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    # How many times a client attached: the current one's number, which its runtime reports
    # its metrics under (as the attempt of chief:0) and names in its heartbeats.
    session: Mapped[int] = mapped_column(Integer, default=0)
    host: Mapped[str] = mapped_column(String(255))  # where it runs, as it said
    pid: Mapped[int] = mapped_column(Integer)
    actor: Mapped[str | None] = mapped_column(String(128))  # whose token attached it
    attached_at: Mapped[datetime] = mapped_column(UTCDateTime)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime)  # its last heartbeat
    # When it detached or was found gone (null while attached): the job's idle time counts
    # from here.
    detached_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @property
    def attached(self) -> bool:
        return self.detached_at is None


def tasks_change_their_job(session: Session, _context: object, _instances: object) -> None:
    """A change to a task is a change to its job: the job's row is updated too, so that its
    version check catches a task change made from a stale view of the job."""
    # Each of session.new and .dirty builds a new set, the latter by comparing every modified
    # object's attributes: taken once, not once per task (a placement pass flushes hundreds).
    new, dirty = session.new, session.dirty
    marked: set[int] = set()  # jobs already updated: their other tasks need no look
    for task in (*new, *dirty):
        if not isinstance(task, Task) or task.job_id is None or task.job_id in marked:
            continue
        if task in dirty and not session.is_modified(task, include_collections=False):
            continue
        job = session.get(Job, task.job_id)
        if job is not None and job not in new:
            job.updated_at = utcnow()
        marked.add(task.job_id)
