"""What the metric sender has yet to deliver: numbered points and records, kept until the
server acknowledges them.

The training thread's side of the sender (`put()` is a lock and a deque append) and the sender
thread's (the next batch, the acks and welcomes the server sends) meet here, under one lock.
The buffer is bounded: when it is full the oldest unacknowledged point is dropped and counted
(`dropped`). Checkpoint reports and command failures are records, sent before the next batch,
in order.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from agents.protocol import (
    MAX_POINTS_PER_BATCH,
    METRIC_NAME_PATTERN,
    CheckpointSaved,
    CommandFailed,
    MetricBatch,
    MetricPoint,
)

log = logging.getLogger("strata.runtime")

# Frames are JSON; a point is about 80 bytes plus its name, so 5,000 points with the longest
# names stay near 1.2 MB. The cap only guards against a server with a small frame limit
# (Strata's takes 8 MiB).
MAX_BATCH_BYTES = 2 << 20
MAX_STEP = 2**62

_NAME = re.compile(METRIC_NAME_PATTERN)

Record = CheckpointSaved | CommandFailed


class Point(NamedTuple):
    seq: int
    name: str
    step: int
    value: float
    wall_time: float


class Outbox:
    """Points numbered from 0 and records, until the server says it stores them."""

    def __init__(self, capacity: int, max_batch: int) -> None:
        self._capacity = max(1, capacity)
        self.max_batch = max(1, min(max_batch, MAX_POINTS_PER_BATCH))
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an ack or welcome arrived
        self._buffer: deque[Point] = deque()
        self._records: deque[Record] = deque()
        self._next_seq = 0
        self._acked = -1  # the highest sequence number the server says it stores
        self._names: set[str] = set()  # names already checked against the pattern
        self._warned: set[str] = set()
        self.flushing = 0  # flush() calls waiting now (under the lock)
        self.dropped = 0  # oldest points dropped because the buffer was full
        self.invalid = 0  # points refused by put() (bad name, step or value)

    # --- the training thread's side -----------------------------------------------------

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        try:
            if name not in self._names:
                if not isinstance(name, str) or _NAME.match(name) is None:
                    self._refuse(f"metric name {name!r} does not match {METRIC_NAME_PATTERN}")
                    return
                if len(self._names) < 10_000:
                    self._names.add(name)
            value = float(value)
            step = int(step)
            if not 0 <= step <= MAX_STEP:
                self._refuse(f"metric {name}: step {step} is outside 0..2**62")
                return
            when = time.time() if wall_time is None else float(wall_time)
            with self._lock:
                seq = self._next_seq
                self._next_seq = seq + 1
                if len(self._buffer) >= self._capacity:
                    self._buffer.popleft()
                    self.dropped += 1
                    if self.dropped == 1:
                        self.warn_once(
                            "overflow",
                            "strata: metric buffer full (%d points); dropping the oldest",
                            self._capacity,
                        )
                self._buffer.append(Point(seq, name, step, value, when))
        except Exception as exc:  # a value that is not a number, and anything else
            self._refuse(f"metric {name!r}: {exc!r}")

    def add_record(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)

    def wait_delivered(
        self, timeout: float, wake: Callable[[], None], sending: Callable[[], bool]
    ) -> bool:
        """Waits until every point and record queued so far is stored; False when the
        timeout passed or nothing is ``sending`` any more. ``wake`` is called once this wait
        counts in ``flushing``."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._changed:
            target = self._next_seq - 1
            last_record = self._records[-1] if self._records else None
            self.flushing += 1
            wake()
            try:
                while (self._buffer and self._buffer[0].seq <= target) or self.holds(last_record):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not sending():
                        return False
                    self._changed.wait(min(remaining, 0.5))
                return True
            finally:
                self.flushing -= 1

    @property
    def pending(self) -> int:
        """Points not yet acknowledged."""
        return len(self._buffer)

    @property
    def acked_seq(self) -> int:
        return self._acked

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned and len(self._warned) < 100:
            self._warned.add(key)
            log.warning(message, *args)

    def _refuse(self, reason: str) -> None:
        self.invalid += 1
        self.warn_once(reason, "strata: metric point dropped: %s", reason)

    # --- the sender thread's side ---------------------------------------------------------

    def first_record(self) -> Record | None:
        with self._lock:
            return self._records[0] if self._records else None

    def holds(self, record: Record | None) -> bool:
        """Whether this very record still waits to be delivered."""
        return record is not None and any(r is record for r in self._records)

    def forget_record(self, record: Record) -> None:
        with self._changed:
            if self._records and self._records[0] is record:
                self._records.popleft()
            self._changed.notify_all()

    def take_batch(self) -> tuple[int, str] | None:
        """(highest seq, frame) for the oldest unacknowledged points, or None if none."""
        with self._lock:
            if not self._buffer:
                return None
            points = list(itertools.islice(self._buffer, self.max_batch))
        size = 0
        wire: list[MetricPoint] = []
        for point in points:
            size += len(point.name) + 100
            if wire and size > MAX_BATCH_BYTES:
                break
            wire.append(
                MetricPoint(
                    seq=point.seq,
                    name=point.name,
                    step=point.step,
                    value=point.value,
                    wall_time=point.wall_time,
                )
            )
        return wire[-1].seq, MetricBatch(points=wire).model_dump_json()

    def apply_ack(self, seq: int) -> None:
        with self._changed:
            if seq > self._acked:
                self._acked = seq
            while self._buffer and self._buffer[0].seq <= seq:
                self._buffer.popleft()
            self._changed.notify_all()

    def apply_welcome(self, next_seq: int) -> None:
        with self._changed:
            if next_seq > self._next_seq:
                # The server holds numbers this process never produced (a second process with
                # the same attempt?): number on from there, or new points would be dropped as
                # duplicates.
                log.warning(
                    "strata: the server already has metric points up to %d; this process "
                    "numbers from %d on",
                    next_seq - 1,
                    next_seq,
                )
                self._next_seq = next_seq
        self.apply_ack(next_seq - 1)
