"""Recording the checkpoints runtimes report, listing them, and which task writes one on
request.

Service functions: keyword-only, they flush and never commit. A report is applied once per
checkpoint: the runtime resends until acknowledged, and a resent report changes nothing.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import CheckpointSaved
from agents.vocabulary import Role, format_task_name
from backend.checkpoints.schemas import checkpoint_read
from backend.db import utcnow
from backend.errors import Conflict, NotFound
from backend.jobs.actions import CHECKPOINTABLE, SAVES_TOGETHER, is_training
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Checkpoint, Job, JobClient
from backend.sizes import human_size


async def record_checkpoint(
    *, session: AsyncSession, job: Job, directory: Path, task: str, saved: CheckpointSaved
) -> Checkpoint:
    """Store a reported checkpoint (once), mark the ones retention deleted, and record an
    event, which the job's stream carries as a `checkpoint` frame."""
    path = str(directory / saved.name)
    existing = await session.scalar(
        select(Checkpoint).where(Checkpoint.job_id == job.id, Checkpoint.path == path)
    )
    written = datetime.fromtimestamp(saved.wall_time, UTC)
    # JSON columns cannot hold NaN (PostgreSQL refuses it): a diverged metric is null.
    metrics = {k: v if math.isfinite(v) else None for k, v in saved.metrics.items()}
    if existing is not None:
        if saved.trigger != "export" or existing.created_at >= written:
            return existing
        # An export is written over in place (a second fit, a job run again into the same
        # dir): the row describes the latest one.
        existing.step, existing.epoch, existing.size_bytes = (
            saved.step,
            saved.epoch,
            saved.size_bytes,
        )
        existing.format, existing.keras, existing.metrics = saved.format, saved.keras, metrics
        existing.created_at, existing.deleted_at = written, None
        row = existing
    else:
        row = Checkpoint(
            job_id=job.id,
            path=path,
            epoch=saved.epoch,
            step=saved.step,
            size_bytes=saved.size_bytes,
            trigger=saved.trigger,
            format=saved.format,
            keras=saved.keras,
            metrics=metrics,
            created_at=written,
        )
        session.add(row)
    deleted: list[str] = []
    if saved.deleted:
        paths = [str(directory / name) for name in saved.deleted]
        for old in await session.scalars(
            select(Checkpoint).where(
                Checkpoint.job_id == job.id,
                Checkpoint.path.in_(paths),
                Checkpoint.deleted_at.is_(None),
                # Retention prunes checkpoints, never an export of the trained model.
                Checkpoint.trigger.is_distinct_from("export"),
            )
        ):
            old.deleted_at = utcnow()
            deleted.append(Path(old.path).name)
    await session.flush()
    what = f"epoch {saved.epoch}, " if saved.epoch is not None else ""
    if saved.trigger == "export":
        message = (
            f"model exported to {saved.name} ({saved.format}) by {task} at step {saved.step} "
            f"({what}{human_size(saved.size_bytes)})"
        )
    else:
        message = (
            f"checkpoint {saved.name} written by {task} at step {saved.step} "
            f"({what}{human_size(saved.size_bytes)}, {saved.trigger})"
        )
    if deleted:
        message += f"; retention deleted {', '.join(sorted(deleted))}"
    await record_event(
        session=session,
        job=job,
        kind=EventKind.checkpoint,
        task=task,
        message=message,
        data={
            "checkpoint": checkpoint_read(row).model_dump(mode="json"),
            "deleted": sorted(deleted),
            "command_id": saved.command_id,
        },
    )
    return row


async def record_reported_checkpoint(
    *, session: AsyncSession, job_id: int, directory: Path, task: str, saved: CheckpointSaved
) -> Checkpoint:
    """`record_checkpoint` for a report that names its job by id (the runtime channel)."""
    job = await session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return await record_checkpoint(
        session=session, job=job, directory=directory, task=task, saved=saved
    )


async def get_checkpoint(*, session: AsyncSession, checkpoint_id: int) -> Checkpoint:
    checkpoint = await session.get(Checkpoint, checkpoint_id)
    if checkpoint is None:
        raise NotFound(f"checkpoint {checkpoint_id} does not exist")
    return checkpoint


class Writer(NamedTuple):
    """Who is asked to write a checkpoint now: a task's attempt, or a client coordinator
    (chief:0, its session the attempt)."""

    name: str
    attempt: int


def checkpoint_writer(job: Job, client: JobClient | None = None) -> Writer:
    """The task asked to write a checkpoint now: the chief, else the first training task (a
    mirrored job's one worker); in a job whose coordinator is the client, the client
    attached (`client`). A Conflict (409) says why there is none: the job is not running,
    its strategy saves only at epoch ends, or no client is attached."""
    if job.status not in CHECKPOINTABLE:
        raise Conflict(
            f"job {job.id} is {job.status.value}; a checkpoint can be taken only while it runs"
        )
    if job.strategy in SAVES_TOGETHER:
        # Every worker takes part in a save (a collective): one cannot save alone.
        raise Conflict(
            f"job {job.id} is multi_worker_mirrored: its workers save together, at epoch ends "
            "(checkpoint.every_epochs); checkpoint now needs parameter_server or mirrored"
        )
    if job.spec is not None and job.job_spec.coordinator == "client":
        if client is None or not client.attached:
            raise Conflict(
                f"job {job.id}'s coordinator is the client, and none is attached: the "
                "client writes the checkpoints (runtime.connect)"
            )
        return Writer(format_task_name(Role.chief, 0), client.session)
    training = [t for t in job.tasks if is_training(t)]
    writer = next((t for t in training if t.role == Role.chief), training[0] if training else None)
    if writer is None:
        raise Conflict(f"job {job.id} has no task that writes checkpoints")
    return Writer(writer.name, writer.attempt)


async def list_checkpoints(
    *, session: AsyncSession, job_id: int, include_deleted: bool = False
) -> list[Checkpoint]:
    """The job's checkpoints, newest first."""
    query = select(Checkpoint).where(Checkpoint.job_id == job_id)
    if not include_deleted:
        query = query.where(Checkpoint.deleted_at.is_(None))
    return list(
        await session.scalars(query.order_by(Checkpoint.created_at.desc(), Checkpoint.id.desc()))
    )
