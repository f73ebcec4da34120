"""The thread that resolves a fit's batch logs off the training thread.

Batch logs are tensors, or under ParameterServerStrategy RemoteValues whose closures may still
be queued when the batch hook runs. Waiting for them on the training thread would stall it, so
`StrataMetrics` only appends them here and this thread reports ``batch/<name>`` and the
in-epoch throughput once they resolve.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from agents.runtime import values as tfvalues
from agents.runtime.values import sanitize_name

if TYPE_CHECKING:
    from agents.runtime.sink import MetricSink

log = logging.getLogger("strata.runtime")

PENDING_LIMIT = 256  # batch logs and handed-over reads kept at most; older ones are dropped


class BatchResolver:
    """Resolves batch logs on its own thread; reports batch/<name> and throughput.

    The training thread calls `offer()` (a deque append) and `new_window()`; everything that
    touches a tensor or a RemoteValue runs here. A generation number, bumped at each epoch
    boundary, drops what is left of the previous epoch, so that every series keeps
    increasing steps (the epoch-end points come after its batch points).
    """

    def __init__(
        self,
        sink: Callable[[], MetricSink],
        *,
        batch_interval: float,
        throughput_interval: float,
        batch_size: int | None,
    ) -> None:
        self._sink = sink
        self._batch_interval = batch_interval
        self._throughput_interval = throughput_interval
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._pending: deque[tuple[int, int, object, float]] = deque(maxlen=PENDING_LIMIT)
        # Reads handed over by the training thread (the learning rate under PS): kept across
        # epoch boundaries, done before pending batch logs, and drained when stopping.
        self._calls: deque[Callable[[], None]] = deque(maxlen=PENDING_LIMIT)
        self._generation = 0
        self._window: tuple[int, float] | None = None  # (step, monotonic time) of last rate
        self._window_end: int | None = None  # the epoch's last step: its rate is epoch_end's
        self._last_batch_report = float("-inf")
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.completed_step = 0  # the highest step known to have run

    def start(self) -> None:
        if self._thread is None or self._stop.is_set() or not self._thread.is_alive():
            # A stopped thread may still be finishing its last item; it exits on its own.
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name="strata-batch-metrics", daemon=True
            )
            self._thread.start()

    def stop(self, wait: float = 0.0) -> None:
        """Stops the thread; with `wait`, gives it that long to finish the handed-over reads."""
        self.new_window(None)
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if wait > 0 and thread is not None and thread is not threading.current_thread():
            thread.join(wait)

    def new_window(self, start: tuple[int, float] | None, end: int | None = None) -> None:
        """Drops pending batch logs and starts a throughput window (epoch boundaries)."""
        with self._lock:
            self._generation += 1
            self._pending.clear()
            self._window = start
            self._window_end = end

    def offer(self, step: int, logs: object, when: float) -> None:
        with self._lock:
            self._pending.append((self._generation, step, logs, when))
        self._wake.set()

    def call_soon(self, call: Callable[[], None]) -> None:
        """Runs `call` on this thread (before any pending batch logs); never blocks."""
        with self._lock:
            self._calls.append(call)
        self._wake.set()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._lock:
                call = self._calls.popleft() if self._calls else None
                item = self._pending.popleft() if call is None and self._pending else None
                if call is None and item is None:
                    self._wake.clear()
            if call is not None:
                self._call(call)
            elif item is not None:
                try:
                    self._handle(item, stop)
                except Exception as exc:
                    log.debug("strata: batch logs could not be reported: %r", exc)
            else:
                self._wake.wait(1.0)
        while True:  # stopped: the handed-over reads still count (the last epoch's rate)
            with self._lock:
                if not self._calls:
                    return
                call = self._calls.popleft()
            self._call(call)

    def _call(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:
            log.debug("strata: a deferred report failed: %r", exc)

    def _handle(self, item: tuple[int, int, object, float], stop: threading.Event) -> None:
        generation, step, logs, offered = item
        remote = tfvalues.is_remote_value(logs)
        if not tfvalues.wait_ready(logs, stop):
            return
        # A RemoteValue is ready when its chunk has run; plain tensors when the hook ran.
        done_at = time.monotonic() if remote else offered
        numbers: dict[str, float] = {}
        report_batch = done_at - self._last_batch_report >= self._batch_interval
        if report_batch:
            numbers = tfvalues.scalars(tfvalues.resolve(logs))
        wall = time.time()
        sink = self._sink()
        with self._lock:
            if generation != self._generation:
                return
            if step > self.completed_step:
                self.completed_step = step
            if report_batch:
                self._last_batch_report = done_at
                for name, value in numbers.items():
                    sink.put(sanitize_name(f"batch/{name}"), value, step, wall)
            window = self._window
            last = self._window_end
            if window is not None and step > window[0] and (last is None or step < last):
                elapsed = done_at - window[1]
                if elapsed >= self._throughput_interval:
                    rate = (step - window[0]) / elapsed
                    sink.put("steps_per_sec", rate, step, wall)
                    if self._batch_size:
                        sink.put("examples_per_sec", rate * self._batch_size, step, wall)
                    self._window = (step, done_at)
