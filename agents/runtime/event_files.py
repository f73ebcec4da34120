"""TensorBoard event files of every scalar the runtime streams.

`EventFileSink` wraps the process's metric sink: each point still goes to the server, and a
copy goes to a bounded deque that a daemon thread drains about once a second into an event
file under ``<checkpoint dir>/tensorboard/<task>`` (``chief-0``, ``worker-1``, ``evaluator-0``).
The training thread pays one deque append per point; the writer thread does the protobuf
encoding and the disk writes. So whatever the runtime reports (epoch and batch metrics, the
learning rate, throughput, ``eval/*``, the coordinator's health, `runtime.report()`) is in
TensorBoard too, under every strategy and for both Kerases: the points are the sink's, not a
Keras callback's, so the chief's batch-level curves under parameter servers are there as well
(tf_keras's own TensorBoard callback cannot write those).

The writer is TensorBoard's own `EventFileWriter` (the `tensorboard` package) rather than
`tf.summary`: it takes each point's step *and wall time* (so runs line up by time as they did
in training), and it runs no TensorFlow op in the training process, where a distribution
strategy decides where ops go. Without the package (an image that lacks it) nothing is
written, and the task says so once in its log; training and streaming go on.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.environment import TaskEnvironment, TaskEnvironmentError
from agents.protocol import CheckpointSaved
from agents.runtime.sink import EXIT_FLUSH_TIMEOUT, CommandHook, MetricSink

__all__ = ["DIR_ENV", "EventFileSink", "event_file_dir", "with_event_files"]

log = logging.getLogger("strata.runtime")

# An explicit event-file dir for this task; without it, <checkpoint dir>/tensorboard/<task>.
DIR_ENV = "STRATA_TENSORBOARD_DIR"
SUBDIR = "tensorboard"
WRITE_INTERVAL = 1.0  # seconds between the writer thread's drains (and file flushes)
CAPACITY = 200_000  # points held for the writer; past it the oldest are dropped (and counted)


def event_file_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """This task's event-file dir, or None when the task has no checkpoint dir (nor DIR_ENV)."""
    environ = os.environ if env is None else env
    explicit = environ.get(DIR_ENV, "").strip()
    if explicit:
        return Path(explicit)
    try:
        told = TaskEnvironment.from_env(environ)
    except TaskEnvironmentError:
        return None
    if told.checkpoint_dir is None or told.task is None:
        return None
    return Path(told.checkpoint_dir) / SUBDIR / str(told.task).replace(":", "-")


class EventFileSink:
    """A `MetricSink` that passes every call to `inner` and writes its points as events."""

    def __init__(
        self,
        inner: MetricSink,
        logdir: Path,
        *,
        interval: float = WRITE_INTERVAL,
        capacity: int = CAPACITY,
    ) -> None:
        self.inner = inner
        self.logdir = logdir
        self.dropped = 0
        self._interval = interval
        self._points: deque[tuple[str, float, int, float]] = deque(maxlen=max(1, capacity))
        self._capacity = max(1, capacity)
        self._writer: Any = None
        self._failed = False
        self._write_lock = threading.Lock()  # one drain at a time: the thread's or flush()'s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="strata-event-files", daemon=True)
        self._thread.start()
        # atexit runs hooks last-registered first: this one, registered after the sender's,
        # writes the last points before the sender's exit flush.
        atexit.register(self._at_exit)

    @property
    def enabled(self) -> bool:
        return self.inner.enabled

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        self.inner.put(name, value, step, wall_time)
        points = self._points
        if len(points) >= self._capacity:
            self.dropped += 1  # the deque's maxlen drops the oldest
        points.append((name, value, step, time.time() if wall_time is None else wall_time))

    def flush(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
        self.write_pending()
        return self.inner.flush(timeout)

    def close(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> None:
        self._stop.set()
        self._thread.join(timeout=max(0.0, timeout))
        self.write_pending()
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self._failed = True  # nothing more is written after close
        self.inner.close(timeout)

    def on_command(self, hook: CommandHook) -> None:
        self.inner.on_command(hook)

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        self.inner.report_checkpoint(saved)

    def report_command_failed(self, command_id: int, reason: str) -> None:
        self.inner.report_command_failed(command_id, reason)

    def write_pending(self) -> int:
        """Writes and flushes every point queued so far; returns how many were written."""
        with self._write_lock:
            if self._failed:
                self._points.clear()
                return 0
            points = self._points
            taken = [points.popleft() for _ in range(len(points))]
            if not taken:
                return 0
            try:
                writer = self._open()
                for name, value, step, wall in taken:
                    writer.add_event(_scalar_event(name, value, step, wall))
                writer.flush()
            except Exception as exc:
                # A full disk or a missing package: the job trains and streams on without files.
                self._failed = True
                log.warning("strata: TensorBoard event files off (%s): %r", self.logdir, exc)
                return 0
            return len(taken)

    def _open(self) -> Any:
        if self._writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            self.logdir.mkdir(parents=True, exist_ok=True)
            # Its own flush timer stays long: this sink flushes after every drain.
            self._writer = EventFileWriter(str(self.logdir), max_queue_size=1024, flush_secs=120)
        return self._writer

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.write_pending()

    def _at_exit(self) -> None:
        try:
            self.write_pending()
            with self._write_lock:
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
        except Exception as exc:
            log.debug("strata: closing the event file failed: %r", exc)


def _scalar_event(name: str, value: float, step: int, wall: float) -> Any:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=name, simple_value=value)])
    return event_pb2.Event(wall_time=wall, step=step, summary=summary)


def with_event_files(sink: MetricSink, env: Mapping[str, str] | None = None) -> MetricSink:
    """`sink` wrapped by an `EventFileSink` when this task has an event-file dir (and reports)."""
    if not sink.enabled:
        return sink
    logdir = event_file_dir(env)
    if logdir is None:
        return sink
    try:
        return EventFileSink(sink, logdir)
    except Exception as exc:
        log.warning("strata: TensorBoard event files off: %r", exc)
        return sink
