"""The background metric sender: numbered points to the server over the runtime channel.

A training process must never wait on, or fail because of, the control plane. So `put()` is a
lock and a deque append, and everything else happens on one daemon thread:

* it connects to ``ws(s)://<STRATA_SERVER>/tasks/connect`` with the task's bearer token and
  says `TaskHello`; the server's `TaskWelcome.next_seq` tells what it already stores, and
  those points are forgotten;
* every ~100 ms it sends the oldest unacknowledged points (at most `MAX_POINTS_PER_BATCH`) as
  one `MetricBatch` and waits for the `Ack` (stop and wait); an ack of N means every point up
  to N is stored, so they are forgotten. After a small batch (a trickle of points, as a
  training loop's) the next waits ~500 ms: fewer commits on the server, fewer wakes here;
* a dropped connection is retried with exponential backoff and jitter (0.5 s to 5 s); the
  points not yet acknowledged are simply sent again (the server skips what it has). While
  someone waits in `flush()` (the process is exiting) the wait is cut short and retries come
  every 0.5 s: a server back from a restart gets the last points before the exit flush gives up;
* the buffer is bounded: when it is full the oldest unacknowledged point is dropped and
  counted (`dropped`; agents.runtime.outbox keeps the points);
* a `Command` frame from the server goes to the hooks registered with `on_command`;
* checkpoint reports (`report_checkpoint`) are records, not points: each is sent before the
  next batch and resent after a reconnect until the server's `CheckpointAck` names it;
* where training is (agents.runtime.progress) is sent when it changed, at most once every
  `PROGRESS_INTERVAL`, and again after each reconnect: the server keeps only the latest.

A script run by hand (no STRATA_SERVER, STRATA_TASK_TOKEN, STRATA_TASK or STRATA_ATTEMPT) gets
a `NullSender` from `from_env`: no thread, no socket, nothing reported. The process-wide sink
that `runtime.report()` and the Keras callbacks use is agents.runtime.process_sink's.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agents.environment import TaskEnvironment, TaskEnvironmentError
from agents.protocol import (
    KEEPALIVE_PING_SECONDS,
    KEEPALIVE_TIMEOUT_SECONDS,
    MAX_POINTS_PER_BATCH,
    Ack,
    CheckpointAck,
    CheckpointSaved,
    Command,
    CommandFailed,
    Progress,
    TaskHello,
    TaskWelcome,
    runtime_server_message,
)
from agents.runtime.outbox import Outbox
from agents.runtime.progress import TrainingProgress, training_progress
from agents.runtime.sink import EXIT_FLUSH_TIMEOUT, CommandHook, MetricSink, NullSender
from agents.tls import CA_FILE_ENV, client_ssl

__all__ = ["MetricSender", "from_env", "task_channel_url"]

log = logging.getLogger("strata.runtime")

# What a task needs to report (TaskEnvironment fields); without one of them it reports nothing.
SENDER_FIELDS = ("server", "task_token", "task", "attempt")
DEFAULT_CAPACITY = 100_000
BATCH_INTERVAL = 0.1  # seconds between batches while points keep coming
# A trickle (a training loop's few points a second) goes in fewer batches: each one costs the
# server a commit and the task a round trip, whatever its size. After a batch sent with fewer
# than TRICKLE_POINTS waiting, the next waits TRICKLE_INTERVAL (unless someone flushes).
TRICKLE_POINTS = 50
TRICKLE_INTERVAL = 0.5
BACKOFF_MIN = 0.5
BACKOFF_MAX = 5.0
PROGRESS_INTERVAL = 1.0  # seconds between two progress reports, at least
ACK_TIMEOUT = 30.0  # the server acknowledges after a database commit; allow a slow one
POLICY_VIOLATION = 1008  # the server's close code for a refused token or task


def task_channel_url(server: str) -> str:
    """The runtime channel's websocket URL for a server URL (http→ws, https→wss)."""
    text = server.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"{TaskEnvironment.variable('server')}={server!r} is not an http(s) URL")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/tasks/connect", "", ""))


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
        trickle_interval: float = TRICKLE_INTERVAL,
        max_batch: int = MAX_POINTS_PER_BATCH,
        ack_timeout: float = ACK_TIMEOUT,
        backoff_min: float = BACKOFF_MIN,
        backoff_max: float = BACKOFF_MAX,
        open_timeout: float = 10.0,
        exit_flush_timeout: float | None = EXIT_FLUSH_TIMEOUT,
        progress: TrainingProgress | None = None,
        progress_interval: float = PROGRESS_INTERVAL,
    ) -> None:
        # Imported here, not at module level: `import agents.runtime` stays cheap, and the
        # import happens on the caller's thread rather than inside the daemon thread.
        from websockets.sync.client import connect

        self._connect = connect
        self.url = url
        self._ssl = client_ssl(url, os.environ.get(CA_FILE_ENV))
        self._token = token
        self._hello = TaskHello(task=task, attempt=attempt)
        self._interval = batch_interval
        self._trickle_interval = max(batch_interval, trickle_interval)
        self._ack_timeout = ack_timeout
        self._backoff_min = backoff_min
        self._backoff_max = backoff_max
        self._open_timeout = open_timeout

        self._outbox = Outbox(capacity, max_batch)
        self._progress = progress if progress is not None else training_progress()
        self._progress_interval = progress_interval
        self._progress_sent: Progress | None = None  # on this connection
        self._progress_sent_at = float("-inf")
        self._hooks: list[CommandHook] = []
        self._hooks_lock = threading.Lock()
        self._closing = threading.Event()
        # Ends a reconnect wait early: set by close(), and by flush() so that a process
        # about to exit does not sleep out a long backoff while the server is back.
        self._wake = threading.Event()

        # Counters, for tests and for whoever wants to look.
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
        self._outbox.put(name, value, step, wall_time)

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        self._outbox.add_record(saved)

    def report_command_failed(self, command_id: int, reason: str) -> None:
        self._outbox.add_record(CommandFailed(id=command_id, reason=reason[:4096]))

    def flush(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
        return self._outbox.wait_delivered(timeout, self._wake.set, self._thread.is_alive)

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
        with self._hooks_lock:
            self._hooks.append(hook)

    @property
    def pending(self) -> int:
        """Points not yet acknowledged."""
        return self._outbox.pending

    @property
    def acked_seq(self) -> int:
        return self._outbox.acked_seq

    @property
    def next_seq(self) -> int:
        return self._outbox.next_seq

    @property
    def dropped(self) -> int:
        """Oldest points dropped because the buffer was full."""
        return self._outbox.dropped

    @property
    def invalid(self) -> int:
        """Points refused by put() (bad name, step or value)."""
        return self._outbox.invalid

    def _at_exit(self) -> None:
        timeout = self._exit_flush_timeout or 0.0
        with contextlib.suppress(Exception):
            self.close(timeout)

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
                self._outbox.warn_once("refused", "strata: the server refused metrics: %s", exc)
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
            if self._outbox.flushing and not refused:
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
                ping_interval=KEEPALIVE_PING_SECONDS,
                ping_timeout=KEEPALIVE_TIMEOUT_SECONDS,
            )
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise _Refused(f"HTTP {exc.response.status_code}") from exc
            raise
        with ws:
            try:
                ws.send(self._hello.model_dump_json())
                self._await_welcome(ws)
                self._progress_sent = None  # a new connection (maybe a new server): resend
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
                self._outbox.apply_welcome(message.next_seq)
                self.connections += 1
                self.connected = True
                return

    def _stream(self, ws: Any) -> None:
        """Sends batches until closing; raises when the connection fails."""
        next_tick = time.monotonic()
        while not self._closing.is_set():
            self._send_records(ws)
            self._send_progress(ws)
            waiting = self._outbox.pending
            batch = self._outbox.take_batch()
            if batch:
                sent_at = time.monotonic()
                ws.send(batch[1])
                self.batches_sent += 1
                self._await_ack(ws, batch[0])
                if self._outbox.pending >= self._outbox.max_batch:
                    continue  # a backlog: send the next batch at once
                trickle = waiting < TRICKLE_POINTS and not self._outbox.flushing
                # The period runs from the send, so the round trip does not add to it.
                next_tick = sent_at + (self._trickle_interval if trickle else self._interval)
            # Between batches, read what the server sends (commands) until the next tick.
            while not self._closing.is_set():
                remaining = next_tick - time.monotonic()
                if remaining <= 0:
                    break
                self._receive(ws, remaining)
            next_tick = time.monotonic() + self._interval

    def _send_records(self, ws: Any) -> None:
        """Sends the queued records; a checkpoint report waits for its ack before the next."""
        while (record := self._outbox.first_record()) is not None:
            ws.send(record.model_dump_json())
            if isinstance(record, CheckpointSaved):
                self._await_checkpoint_ack(ws, record)
            else:
                self._outbox.forget_record(record)

    def _send_progress(self, ws: Any) -> None:
        now = time.monotonic()
        if now - self._progress_sent_at < self._progress_interval:
            return
        progress = self._progress.snapshot()
        if progress is None or progress == self._progress_sent:
            return
        ws.send(progress.model_dump_json())
        self._progress_sent, self._progress_sent_at = progress, now

    def _await_checkpoint_ack(self, ws: Any, record: CheckpointSaved) -> None:
        deadline = time.monotonic() + self._ack_timeout
        while self._outbox.holds(record):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no ack for checkpoint {record.name} in {self._ack_timeout}s")
            self._receive(ws, remaining)

    def _await_ack(self, ws: Any, seq: int) -> None:
        deadline = time.monotonic() + self._ack_timeout
        while self._outbox.acked_seq < seq:
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
            self._outbox.apply_ack(message.seq)
        elif isinstance(message, Command):
            self._dispatch(message)
        elif isinstance(message, CheckpointAck):
            head = self._outbox.first_record()
            if isinstance(head, CheckpointSaved) and head.name == message.name:
                self._outbox.forget_record(head)
        return message

    def _dispatch(self, command: Command) -> None:
        log.debug("strata: command %s (id %d) from the server", command.action, command.id)
        with self._hooks_lock:
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
