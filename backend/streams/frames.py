"""The frames of the live streams (`/jobs/{id}/stream`, `/stream`), as pydantic models.

Each server frame is built once, where it happens (an event committed, points stored, log
lines written, history read), and shared by every subscriber: its JSON is made once and
each subscriber's cursor is spliced in (`ServerFrame.text`). So `cursor` is not a field of
the models but it is in their JSON schema, which describes the frames as clients get them.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PrivateAttr, RootModel

from backend.checkpoints.schemas import CheckpointRead

CURSOR_DESCRIPTION = (
    "Where this subscriber is, after this frame; opaque. Subscribe with the last one seen "
    "to resume from there."
)


def _with_cursor(schema: dict[str, Any]) -> None:
    schema["properties"]["cursor"] = {
        "type": "string",
        "title": "Cursor",
        "description": CURSOR_DESCRIPTION,
    }
    schema.setdefault("required", []).append("cursor")


class ServerFrame(BaseModel):
    """A frame the server sends on a stream: `{"type": ..., ..., "cursor": ...}`."""

    model_config = ConfigDict(frozen=True, json_schema_extra=_with_cursor)

    _json: str | None = PrivateAttr(default=None)

    def text(self, cursor: str) -> str:
        """The frame on the wire for one subscriber: the shared JSON plus its cursor."""
        body = self._json
        if body is None:
            body = self._json = self.model_dump_json()
        # Every frame has at least its type, so the body is a non-empty object: `{...}`.
        return f'{body[:-1]},"cursor":{json.dumps(cursor)}}}'


def _isoformat(at: datetime) -> str:
    return at.isoformat()


class StreamEvent(BaseModel):
    """A job event as streams carry it: the fields of `JobEventRead`."""

    model_config = ConfigDict(frozen=True)

    id: int
    # Sent as Python writes it (`+00:00`, not `Z`), as the streams always have.
    at: Annotated[datetime, PlainSerializer(_isoformat, return_type=str)]
    kind: str
    task: str | None
    from_status: str | None
    to_status: str | None
    message: str | None
    data: dict[str, Any]
    actor: str | None = None  # who caused it through the API; null: the system


class EventFrame(ServerFrame):
    """Something happened to a job: a status change, a restart, a request."""

    type: Literal["event"]
    job_id: int
    event: StreamEvent


class CheckpointFrame(ServerFrame):
    """A checkpoint was written (an event of kind `checkpoint`, with the checkpoint beside it)."""

    type: Literal["checkpoint"]
    job_id: int
    checkpoint: CheckpointRead
    deleted: list[str] = Field(description="Names of the checkpoints retention deleted.")
    event: StreamEvent


# Per metric name: [[steps], [values], [wall times]], as uPlot draws them; a NaN or infinite
# value is null (JSON has neither).
Columns = tuple[list[int], list[float | None], list[float]]


class MetricsFrame(ServerFrame):
    """Metric points of one task attempt, columnar per metric name."""

    type: Literal["metrics"]
    task: str
    attempt: int
    last_seq: int = Field(description="The highest sequence number in this frame.")
    series: dict[str, Columns]


class LogFrame(ServerFrame):
    """Log lines of one task attempt, from line number `first_line` on."""

    type: Literal["log"]
    task: str
    attempt: int
    first_line: int
    lines: list[str]


class UsageFrame(ServerFrame):
    """What one task attempt and the GPUs it holds used, sampled by its agent every few
    seconds. Live only: kept in no history, and a cursor does not count it."""

    type: Literal["usage"]
    task: str
    attempt: int
    host: str
    wall_time: float = Field(description="When the agent sampled it (seconds since the epoch).")
    values: dict[str, float | None] = Field(
        description="task/cpu_percent, task/cpu_seconds, task/rss_bytes, and per GPU it holds "
        "host/gpu<i>/utilization_percent, host/gpu<i>/memory_used_bytes and "
        "host/gpu<i>/memory_total_bytes; null where the agent could not read one."
    )


class HistoryEndFrame(ServerFrame):
    """History is over: what follows is live."""

    type: Literal["history_end"]


Frame = EventFrame | CheckpointFrame | MetricsFrame | LogFrame | UsageFrame | HistoryEndFrame


class StreamFrame(RootModel[Annotated[Frame, Field(discriminator="type")]]):
    """Any frame the server sends on `/jobs/{id}/stream` (all kinds) or `/stream` (events
    and checkpoints of every job, then `history_end`)."""


class Subscribe(BaseModel):
    """The first (and only) frame a client sends on a stream."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["subscribe"]
    cursor: str | None = Field(
        default=None,
        max_length=65_536,
        description="The last cursor seen, to resume after it; null for all the history.",
    )


SUBSCRIBE_EXAMPLE = json.dumps({"type": "subscribe", "cursor": None})

HISTORY_END = HistoryEndFrame(type="history_end")
