"""Where a stream subscriber is: the last event id, and per task attempt the metric
sequence number and log line it has. Opaque to clients: they hand back the last one seen."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any


class InvalidCursor(ValueError):
    pass


def attempt_id(task: str, attempt: int) -> str:
    return f"{task}.{attempt}"


@dataclass
class Cursor:
    event: int = 0  # last job event id delivered
    metrics: dict[str, int] = field(default_factory=dict)  # "chief:0.0" → last seq delivered
    logs: dict[str, int] = field(default_factory=dict)  # "chief:0.0" → lines delivered

    def encode(self) -> str:
        raw = json.dumps(
            {"e": self.event, "m": self.metrics, "l": self.logs}, separators=(",", ":")
        )
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        if len(text) > 65_536:
            raise InvalidCursor("cursor is too long")
        try:
            data: Any = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise InvalidCursor("cursor is not one this server gave out") from None
        if not (
            isinstance(data, dict)
            and isinstance(data.get("e"), int)
            and _int_map(data.get("m"))
            and _int_map(data.get("l"))
        ):
            raise InvalidCursor("cursor is not one this server gave out")
        return cls(event=data["e"], metrics=data["m"], logs=data["l"])


def _int_map(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in value.items()
    )
