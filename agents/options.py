"""Job options the runtime acts on: the export of the trained model and the strategy's
options, one model each, shared by the job spec (which validates them) and the runtime
(which reads them back from the task's environment as JSON).

Both sides import them from here so that what the server accepts is exactly what the runtime
understands; this module imports neither TensorFlow nor anything of the server's.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Names in a job's checkpoint dir that belong to the checkpoints and the backups: an export
# may not take one of them (retention deletes ckpt-<N>; BackupAndRestore owns backup/).
_RESERVED_EXPORT_NAME = re.compile(
    r"^(ckpt-\d+.*|checkpoint|backup|tensorboard|workertemp.*|strata-checkpoints\.json.*)$"
)
EXPORT_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}$"
KERAS_SUFFIX = ".keras"

ExportFormat = Literal["auto", "saved_model", "keras"]
Communication = Literal["auto", "ring", "nccl"]

MAX_SHARDS = 1024
DEFAULT_MIN_SHARD_BYTES = 256 << 10


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ExportOptions(_Options):
    """Where and how the runtime exports the trained model when `fit` ends successfully."""

    dir: str = Field(
        default="export",
        description="A name inside the job's checkpoint dir: the SavedModel's directory "
        "(a .keras file is this name with .keras added, unless it ends with it).",
    )
    format: ExportFormat = Field(
        default="auto",
        description="auto: a SavedModel for a tf_keras model, a .keras file for a Keras 3 "
        "model; saved_model or keras force one.",
    )

    @field_validator("dir")
    @classmethod
    def _a_name_in_the_checkpoint_dir(cls, value: str) -> str:
        if not re.fullmatch(EXPORT_NAME_PATTERN, value):
            raise ValueError(
                "must be a name inside the job's checkpoint dir: 1-100 letters, digits, "
                f"'.', '_' or '-', starting with a letter, digit or '_' (no '/'); got {value!r}"
            )
        if _RESERVED_EXPORT_NAME.match(value):
            raise ValueError(
                f"{value!r} is a name the job's checkpoints or backups use; choose another"
            )
        return value


class Partitioner(_Options):
    """ParameterServerStrategy's variable partitioner (tf MinSizePartitioner)."""

    min_shard_bytes: Annotated[int, Field(ge=1, le=1 << 40)] = Field(
        default=DEFAULT_MIN_SHARD_BYTES,
        description="A variable is split only into shards at least this large.",
    )
    max_shards: Annotated[int, Field(ge=1, le=MAX_SHARDS)] | None = Field(
        default=None, description="At most this many shards per variable; null: one per ps."
    )


class StrategyOptions(_Options):
    """Options of the job's tf.distribute strategy; each belongs to one strategy."""

    communication: Communication | None = Field(
        default=None,
        description="multi_worker_mirrored only: the collective implementation (auto, ring, nccl).",
    )
    partitioner: Partitioner | None = Field(
        default=None, description="parameter_server only: how variables are split over the ps."
    )
    collective_timeout: Annotated[float, Field(gt=0, le=86_400)] | None = Field(
        default=None,
        description="multi_worker_mirrored only: seconds a collective may wait for its peers "
        "before it fails the step (TensorFlow's CommunicationOptions.timeout_seconds), for the "
        "restart policy to handle. Off by default: TensorFlow keeps a thread per collective for "
        "the whole timeout (thousands of threads at a few hundred collectives a second); the "
        "job's hang detection finds the same stall without that cost.",
    )
