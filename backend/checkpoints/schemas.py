"""What the API returns for checkpoints."""

from __future__ import annotations

from datetime import datetime
from pathlib import PurePath
from typing import Literal, cast

from pydantic import BaseModel

from backend.jobs.models import Checkpoint

Format = Literal["tf_checkpoint", "saved_model", "keras"]
KerasName = Literal["tf_keras", "keras3"]


class CheckpointRead(BaseModel):
    id: int
    name: str  # the checkpoint prefix, e.g. "ckpt-7"; an export's dir or file name
    # tf_checkpoint: <path>.index and <path>.data-* are its files; saved_model: <path> is a
    # SavedModel dir; keras: <path> is a .keras file
    path: str
    format: Format
    keras: KerasName | None  # the Keras that wrote it, when known
    step: int | None
    epoch: int | None
    size_bytes: int | None
    trigger: str | None  # epoch | time | command | end | export (the trained model)
    metrics: dict[str, float | None]  # the epoch-end metrics it was written with
    created_at: datetime  # when the runtime finished writing it
    deleted_at: datetime | None  # when the retention policy removed it


class CheckpointNow(BaseModel):
    """The answer to a checkpoint-now request: the checkpoint, and how long it took."""

    command_id: int
    task: str  # the task that wrote it
    requested_at: datetime
    seconds: float  # from the request to the runtime's report that it was written
    checkpoint: CheckpointRead


def checkpoint_read(row: Checkpoint) -> CheckpointRead:
    return CheckpointRead(
        id=row.id,
        name=PurePath(row.path).name,
        path=row.path,
        format=cast(Format, row.format or "tf_checkpoint"),
        keras=cast(KerasName | None, row.keras if row.keras in ("tf_keras", "keras3") else None),
        step=row.step,
        epoch=row.epoch,
        size_bytes=row.size_bytes,
        trigger=row.trigger,
        metrics=row.metrics or {},
        created_at=row.created_at,
        deleted_at=row.deleted_at,
    )
