"""When the runtime saves checkpoints and which it keeps: the policy and retention.

Pure functions over plain values (no TensorFlow), so that the rules are easy to read and to
test; `agents.runtime.checkpoints` applies them.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agents.environment import TaskEnvironment
from agents.runtime.values import sanitize_name

log = logging.getLogger("strata.runtime")

POLICY_ENV = TaskEnvironment.variable("checkpoint_policy")

Mode = Literal["min", "max"]


# --- the policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeepBest:
    metric: str
    mode: Mode = "min"


@dataclass(frozen=True)
class CheckpointPolicy:
    """When to save and what to keep (the job spec's `checkpoint`, less its dir)."""

    every_epochs: int | None = 1
    every_seconds: float | None = None
    keep: int | None = 5  # None: keep all
    keep_best: KeepBest | None = None
    # BackupAndRestore's backups (what a restarted chief resumes from) at an epoch end only
    # when this long has passed since the last one, or since training began; 0: every epoch.
    # Under parameter_server a backup is slow enough that one every short epoch costs much of
    # the training speed.
    backup_every_seconds: float = 30.0

    @property
    def saves(self) -> bool:
        """Whether the runtime saves on its own (checkpoint-now works either way)."""
        return self.every_epochs is not None or self.every_seconds is not None


def parse_policy(raw: str | None) -> CheckpointPolicy:
    """STRATA_CHECKPOINT_POLICY, e.g. ``{"every_epochs": 1, "every_seconds": null, "keep": 5,
    "keep_best": {"metric": "loss", "mode": "min"}}``; missing keys take the defaults, and an
    unusable value gives the default policy with a warning (it never stops training)."""
    if raw is None or not raw.strip():
        return CheckpointPolicy()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        default = CheckpointPolicy()
        every_epochs = _optional_number(data, "every_epochs", default.every_epochs, integer=True)
        every_seconds = _optional_number(data, "every_seconds", default.every_seconds)
        keep = _optional_number(data, "keep", default.keep, integer=True)
        backup_every = _optional_number(
            data, "backup_every_seconds", default.backup_every_seconds, allow_zero=True
        )
        best = data.get("keep_best")
        keep_best = None
        if best is not None:
            if not isinstance(best, dict) or not isinstance(best.get("metric"), str):
                raise ValueError("keep_best must be {metric, mode}")
            mode = best.get("mode", "min")
            if mode not in ("min", "max"):
                raise ValueError(f"keep_best.mode {mode!r} is not min or max")
            keep_best = KeepBest(sanitize_name(best["metric"]), "max" if mode == "max" else "min")
        return CheckpointPolicy(
            every_epochs=None if every_epochs is None else int(every_epochs),
            every_seconds=every_seconds,
            keep=None if keep is None else int(keep),
            keep_best=keep_best,
            backup_every_seconds=(
                default.backup_every_seconds if backup_every is None else float(backup_every)
            ),
        )
    except (ValueError, TypeError) as exc:
        log.warning(
            "strata: %s=%r is not usable (%s); saving every epoch, keeping 5", POLICY_ENV, raw, exc
        )
        return CheckpointPolicy()


def _optional_number(
    data: Mapping[str, Any],
    key: str,
    default: float | None,
    *,
    integer: bool = False,
    allow_zero: bool = False,
) -> float | None:
    if key not in data:
        return default
    value = data[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number or null")
    if integer and value != int(value):
        raise ValueError(f"{key} must be a whole number")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{key} must be {'zero or more' if allow_zero else 'positive'}")
    return float(value)


# --- retention --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A checkpoint, as retention sees it."""

    name: str
    number: int  # higher is newer
    score: float | None = None  # the keep_best metric, when this checkpoint may be "best"


def checkpoints_to_keep(
    candidates: Sequence[Candidate], keep: int | None, mode: Mode | None = None
) -> list[str]:
    """The names to keep, oldest first: the latest `keep` (None: all; never fewer than one)
    and, when `mode` is given, the best by score, lowest for "min" and highest for "max".

    Candidates without a finite score are never best. On a tie the earliest stays best: as
    with tf_keras's ModelCheckpoint, only a strict improvement makes a new best.
    """
    ordered = sorted(candidates, key=lambda c: c.number)
    latest = ordered if keep is None else ordered[-max(1, keep) :]
    kept = {c.name for c in latest}
    if mode is not None:
        best: Candidate | None = None
        for candidate in ordered:
            score = candidate.score
            if score is None or not math.isfinite(score):
                continue
            if (
                best is None
                or best.score is None
                or (score < best.score if mode == "min" else score > best.score)
            ):
                best = candidate
        if best is not None:
            kept.add(best.name)
    return [c.name for c in ordered if c.name in kept]
