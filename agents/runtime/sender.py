"""The background metric sender: numbered points to the server over the runtime channel.

A training process must never wait on, or fail because of, the control plane. So `put()` is a
lock and a deque append, and everything else happens on one daemon thread:

* it connects to ``ws(s)://<STRATA_SERVER>/tasks/connect`` with the task's bearer token and
  says `TaskHello`; the server's `TaskWelcome.next_seq` tells what it already stores, and
  those points are forgotten;
* every ~100 ms it sends the oldest unacknowledged points (at most `MAX_POINTS_PER_BATCH`) as
  one `MetricBatch` and waits for the `Ack` (stop and wait); an ack of N means every point up
  to N is stored, so they are forgotten;
* a dropped connection is retried with exponential backoff and jitter (0.5 s to 5 s); the
  points not yet acknowledged are simply sent again (the server skips what it has). While
  someone waits in `flush()` (the process is exiting) the wait is cut short and retries come
  every 0.5 s: a server back from a restart gets the last points before the exit flush gives up;
* the buffer is bounded: when it is full the oldest unacknowledged point is dropped and
  counted (`dropped`);
* a `Command` frame from the server goes to the hooks registered with `on_command`;
* checkpoint reports (`report_checkpoint`) are records, not points: each is sent before the
  next batch and resent after a reconnect until the server's `CheckpointAck` names it.

A script run by hand (no STRATA_SERVER, STRATA_TASK_TOKEN, STRATA_TASK or STRATA_ATTEMPT) gets
a `NullSender`: no thread, no socket, nothing reported. `get_sender()` is the process-wide
instance that `runtime.report()` and the Keras callbacks use.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit, urlunsplit

from agents.environment import TaskEnvironment, TaskEnvironmentError
from agents.protocol import (
    MAX_POINTS_PER_BATCH,
    METRIC_NAME_PATTERN,
    Ack,
    CheckpointAck,
    CheckpointSaved,
    Command,
    CommandFailed,
    MetricBatch,
    MetricPoint,
    TaskHello,
    TaskWelcome,
    runtime_server_message,
)
from agents.runtime.values import sanitize_name
from agents.tls import CA_FILE_ENV, client_ssl

__all__ = [
    "MetricSender",
    "MetricSink",
    "NullSender",
    "from_env",
    "get_sender",
    "sanitize_name",
    "set_sender",
    "task_channel_url",
]

log = logging.getLogger("strata.runtime")

# What a task needs to report (TaskEnvironment fields); without one of them it reports nothing.
SENDER_FIELDS = ("server", "task_token", "task", "attempt")
DEFAULT_CAPACITY = 100_000
BATCH_INTERVAL = 0.1  # seconds between batches while points keep coming
BACKOFF_MIN = 0.5
BACKOFF_MAX = 5.0
ACK_TIMEOUT = 30.0  # the server acknowledges after a database commit; allow a slow one
EXIT_FLUSH_TIMEOUT = 5.0
# Frames are JSON; a point is about 80 bytes plus its name, so 5,000 points with the longest
# names stay near 1.2 MB. The cap only guards against a server with a small frame limit
# (Strata's takes 8 MiB).
MAX_BATCH_BYTES = 2 << 20
MAX_STEP = 2**62
POLICY_VIOLATION = 1008  # the server's close code for a refused token or task

_NAME = re.compile(METRIC_NAME_PATTERN)

CommandHook = Callable[[Command], None]


class Point(NamedTuple):
    seq: int
    name: str
    step: int
    value: float
    wall_time: float


class MetricSink(Protocol):
    """Where the runtime's metric points go: the server, nowhere, or a test's recorder."""

    @property
    def enabled(self) -> bool: ...

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Queues one point; never blocks and never raises."""
        ...

    def flush(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
        """Waits until every point queued so far is stored; False when the timeout passed."""
        ...

    def close(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> None: ...

    def on_command(self, hook: CommandHook) -> None: ...

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        """Queues a checkpoint report; it is resent until the server has stored it."""
        ...

    def report_command_failed(self, command_id: int, reason: str) -> None: ...


def valid_name(name: str) -> bool:
    return _NAME.match(name) is not None


def task_channel_url(server: str) -> str:
    """The runtime channel's websocket URL for a server URL (http→ws, https→wss)."""
    text = server.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"{TaskEnvironment.variable('server')}={server!r} is not an http(s) URL")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/tasks/connect", "", ""))


class NullSender:
    """Reports nothing: a script run by hand, outside Strata."""

    enabled = False
    dropped = 0

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        return None

    def flush(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
        return True

    def close(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> None:
        return None

    def on_command(self, hook: CommandHook) -> None:
        return None

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        return None

    def report_command_failed(self, command_id: int, reason: str) -> None:
        return None


class _Refused(Exception):
    """The server will not take this task's points (bad token, unknown task attempt)."""


class MetricSender:
    """Streams points to the server from a daemon thread; see the module docstring."""

    enabled = True

    def __init__(
        self,
        url: str,
        token: str,
        task: str,
        attempt: int,
        *,
        capacity: int = DEFAULT_CAPACITY,
        batch_interval: float = BATCH_INTERVAL,
        max_batch: int = MAX_POINTS_PER_BATCH,
        ack_timeout: float = ACK_TIMEOUT,
        backoff_min: float = BACKOFF_MIN,
        backoff_max: float = BACKOFF_MAX,
        open_timeout: float = 10.0,
        exit_flush_timeout: float | None = EXIT_FLUSH_TIMEOUT,
    ) -> None:
        # Imported here, not at module level: `import agents.runtime` stays cheap, and the
        # import happens on the caller's thread rather than inside the daemon thread.
        from websockets.sync.client import connect

        self._connect = connect
        self.url = url
        self._ssl = client_ssl(url, os.environ.get(CA_FILE_ENV))
        self._token = token
        self._hello = TaskHello(task=task, attempt=attempt)
        self._capacity = max(1, capacity)
        self._interval = batch_interval
        self._max_batch = max(1, min(max_batch, MAX_POINTS_PER_BATCH))
        self._ack_timeout = ack_timeout
        self._backoff_min = backoff_min
        self._backoff_max = backoff_max
        self._open_timeout = open_timeout

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an ack or welcome arrived
        self._buffer: deque[Point] = deque()
        # Checkpoint reports and command failures, sent before the next batch, in order.
        self._records: deque[CheckpointSaved | CommandFailed] = deque()
        self._next_seq = 0
        self._acked = -1  # the highest sequence number the server says it stores
        self._names: set[str] = set()  # names already checked against the pattern
        self._hooks: list[CommandHook] = []
        self._closing = threading.Event()
        # Ends a reconnect wait early: set by close(), and by flush() so that a process
        # about to exit does not sleep out a long backoff while the server is back.
        self._wake = threading.Event()
        self._flushing = 0  # flush() calls waiting now (under the lock)
        self._warned: set[str] = set()

        # Counters, for tests and for whoever wants to look.
        self.dropped = 0  # oldest points dropped because the buffer was full
        self.invalid = 0  # points refused by put() (bad name, step or value)
        self.batches_sent = 0
        self.connections = 0  # sessions that got a welcome
        self.connected = False

        self._exit_flush_timeout = exit_flush_timeout
        if exit_flush_timeout is not None:
            atexit.register(self._at_exit)
        self._thread = threading.Thread(target=self._run, name="strata-metrics", daemon=True)
        self._thread.start()

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
                        self._warn_once(
                            "overflow",
                            "strata: metric buffer full (%d points); dropping the oldest",
                            self._capacity,
                        )
                self._buffer.append(Point(seq, name, step, value, when))
        except Exception as exc:  # a value that is not a number, and anything else
            self._refuse(f"metric {name!r}: {exc!r}")

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        with self._lock:
            self._records.append(saved)

    def report_command_failed(self, command_id: int, reason: str) -> None:
        with self._lock:
            self._records.append(CommandFailed(id=command_id, reason=reason[:4096]))

    def flush(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._changed:
            target = self._next_seq - 1
            last_record = self._records[-1] if self._records else None
            self._flushing += 1
            self._wake.set()
            try:
                while (self._buffer and self._buffer[0].seq <= target) or any(
                    r is last_record for r in self._records
                ):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not self._thread.is_alive():
                        return False
                    self._changed.wait(min(remaining, 0.5))
                return True
            finally:
                self._flushing -= 1

    def close(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> None:
        """Flushes for up to `timeout` seconds, then stops the thread."""
        if self._closing.is_set():
            return
        if timeout > 0:
            self.flush(timeout)
        self._closing.set()
        self._wake.set()
        with contextlib.suppress(Exception):
            atexit.unregister(self._at_exit)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)

    def on_command(self, hook: CommandHook) -> None:
        """Calls `hook(command)` on the sender thread for each Command the server sends."""
        with self._lock:
            self._hooks.append(hook)

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

    def _at_exit(self) -> None:
        timeout = self._exit_flush_timeout or 0.0
        with contextlib.suppress(Exception):
            self.close(timeout)

    def _refuse(self, reason: str) -> None:
        self.invalid += 1
        self._warn_once(reason, "strata: metric point dropped: %s", reason)

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned and len(self._warned) < 100:
            self._warned.add(key)
            log.warning(message, *args)

    # --- the sender thread ----------------------------------------------------------------

    def _run(self) -> None:
        delay = self._backoff_min
        while not self._closing.is_set():
            sessions = self.connections
            refused = False
            self._wake.clear()
            try:
                self._session()
            except _Refused as exc:
                self._warn_once("refused", "strata: the server refused metrics: %s", exc)
                refused = True
            except Exception as exc:
                log.debug("strata: metric channel to %s failed: %r", self.url, exc)
            finally:
                self.connected = False
            if self._closing.is_set():
                break
            if refused:
                delay = self._backoff_max
            elif self.connections != sessions:
                delay = self._backoff_min  # that session worked: start over from short waits
            pause = delay * random.uniform(0.75, 1.25)
            if self._flushing and not refused:
                # Someone waits for these points with a deadline (at exit, 5 s): a long
                # backoff would outlast it while the server may already be back.
                pause = min(pause, self._backoff_min)
            self._wake.wait(pause)
            delay = min(self._backoff_max, delay * 2)

    def _session(self) -> None:
        from websockets.exceptions import ConnectionClosed, InvalidStatus

        try:
            ws = self._connect(
                self.url,
                additional_headers={"Authorization": f"Bearer {self._token}"},
                ssl=self._ssl,
                open_timeout=self._open_timeout,
                close_timeout=1.0,
                proxy=None,
                max_size=4 << 20,
            )
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise _Refused(f"HTTP {exc.response.status_code}") from exc
            raise
        with ws:
            try:
                ws.send(self._hello.model_dump_json())
                self._await_welcome(ws)
                self._stream(ws)
            except ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code == POLICY_VIOLATION:
                    raise _Refused(exc.rcvd.reason or "policy violation") from exc
                raise

    def _await_welcome(self, ws: Any) -> None:
        deadline = time.monotonic() + self._ack_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no task_welcome from the server")
            message = self._receive(ws, remaining)
            if isinstance(message, TaskWelcome):
                self._apply_welcome(message.next_seq)
                self.connections += 1
                self.connected = True
                return

    def _stream(self, ws: Any) -> None:
        """Sends batches until closing; raises when the connection fails."""
        next_tick = time.monotonic()
        while not self._closing.is_set():
            self._send_records(ws)
            batch = self._take_batch()
            if batch:
                sent_at = time.monotonic()
                ws.send(batch[1])
                self.batches_sent += 1
                self._await_ack(ws, batch[0])
                if len(self._buffer) >= self._max_batch:
                    continue  # a backlog: send the next batch at once
                # The period runs from the send, so the round trip does not add to it.
                next_tick = sent_at + self._interval
            # Between batches, read what the server sends (commands) until the next tick.
            while not self._closing.is_set():
                remaining = next_tick - time.monotonic()
                if remaining <= 0:
                    break
                self._receive(ws, remaining)
            next_tick = time.monotonic() + self._interval

    def _send_records(self, ws: Any) -> None:
        """Sends the queued records; a checkpoint report waits for its ack before the next."""
        while True:
            with self._lock:
                if not self._records:
                    return
                record = self._records[0]
            ws.send(record.model_dump_json())
            if isinstance(record, CheckpointSaved):
                self._await_checkpoint_ack(ws, record)
            else:
                self._forget_record(record)

    def _await_checkpoint_ack(self, ws: Any, record: CheckpointSaved) -> None:
        deadline = time.monotonic() + self._ack_timeout
        while any(r is record for r in self._records):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no ack for checkpoint {record.name} in {self._ack_timeout}s")
            self._receive(ws, remaining)

    def _forget_record(self, record: CheckpointSaved | CommandFailed) -> None:
        with self._changed:
            if self._records and self._records[0] is record:
                self._records.popleft()
            self._changed.notify_all()

    def _take_batch(self) -> tuple[int, str] | None:
        """(highest seq, frame) for the oldest unacknowledged points, or None if none."""
        with self._lock:
            if not self._buffer:
                return None
            points = list(itertools.islice(self._buffer, self._max_batch))
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

    def _await_ack(self, ws: Any, seq: int) -> None:
        deadline = time.monotonic() + self._ack_timeout
        while self._acked < seq:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no ack for seq {seq} in {self._ack_timeout}s")
            self._receive(ws, remaining)

    def _receive(self, ws: Any, timeout: float) -> Any:
        """Reads and handles one frame; None when none came within `timeout`."""
        try:
            raw = ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        try:
            message = runtime_server_message.validate_json(raw)
        except Exception as exc:
            log.debug("strata: ignoring a frame from the server: %r", exc)
            return None
        if isinstance(message, Ack):
            self._apply_ack(message.seq)
        elif isinstance(message, Command):
            self._dispatch(message)
        elif isinstance(message, CheckpointAck):
            with self._lock:
                head = self._records[0] if self._records else None
            if isinstance(head, CheckpointSaved) and head.name == message.name:
                self._forget_record(head)
        return message

    def _apply_ack(self, seq: int) -> None:
        with self._changed:
            if seq > self._acked:
                self._acked = seq
            while self._buffer and self._buffer[0].seq <= seq:
                self._buffer.popleft()
            self._changed.notify_all()

    def _apply_welcome(self, next_seq: int) -> None:
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
        self._apply_ack(next_seq - 1)

    def _dispatch(self, command: Command) -> None:
        log.debug("strata: command %s (id %d) from the server", command.action, command.id)
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            try:
                hook(command)
            except Exception:
                log.exception("strata: a command hook failed on %r", command)


def from_env(env: Mapping[str, str] | None = None, **options: Any) -> MetricSink:
    """A sender for this task, or a NullSender when the environment does not name one."""
    try:
        told = TaskEnvironment.from_env(os.environ if env is None else env)
    except TaskEnvironmentError as exc:
        log.warning("strata: metrics off: %s", exc)
        return NullSender()
    server, token, task, attempt = told.server, told.task_token, told.task, told.attempt
    if server is None or token is None or task is None or attempt is None:
        missing = [TaskEnvironment.variable(f) for f in SENDER_FIELDS if getattr(told, f) is None]
        log.debug("strata: metrics off (%s not set)", ", ".join(missing))
        return NullSender()
    try:
        return MetricSender(task_channel_url(server), token, str(task), attempt, **options)
    except Exception as exc:
        log.warning("strata: metrics off: %s", exc)
        return NullSender()


_instance: MetricSink | None = None
_instance_lock = threading.Lock()


def get_sender() -> MetricSink:
    """The process's sender, created from the environment on first use."""
    global _instance
    sender = _instance
    if sender is None:
        with _instance_lock:
            if _instance is None:
                # The points go to TensorBoard event files too, where the task has a dir.
                from agents.runtime.event_files import with_event_files

                _instance = with_event_files(from_env())
            sender = _instance
    return sender


def set_sender(sender: MetricSink | None) -> MetricSink | None:
    """Replaces the process's sender (None: the next use builds one from the environment).

    Returns the previous one, which is not closed.
    """
    global _instance
    with _instance_lock:
        previous, _instance = _instance, sender
    return previous


def _after_fork_in_child() -> None:
    # A forked child (a multiprocessing data loader) has no sender thread, and would number
    # its points from the parent's sequence: it reports nothing.
    global _instance, _instance_lock
    _instance_lock = threading.Lock()
    _instance = NullSender()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
