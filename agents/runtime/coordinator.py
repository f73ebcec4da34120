"""Health of a ParameterServerStrategy `ClusterCoordinator`, polled off the training thread.

TensorFlow exposes no public health API for the coordinator, so this reads its internals
(TF 2.21, tensorflow/python/distribute/coordinator/cluster_coordinator.py), each access
guarded: a missing attribute only switches off the metric that needs it (logged once, at
debug level), and nothing here ever raises into training.

Read every poll (about once a second):

* ``coordinator._cluster.closure_queue._queue.qsize()``: closures scheduled and not yet
  taken by a worker (`coordinator/queue_depth`);
* ``coordinator._cluster.closure_queue.inflight_closure_count``: closures a worker is
  running (`coordinator/inflight`);
* ``coordinator._cluster.workers[i].worker_index`` and ``._is_dead_with_error`` (None or
  False while the worker is up, the exception while it is failed): `worker:<i>/up`.

Wrapped once per coordinator, as instance attributes that call the original method:

* ``closure_queue.mark_finished``, which a worker's closure thread calls after each closure
  that succeeded: counted per calling thread, and the thread is matched to its worker by its
  name (``WorkerClosureProcessingLoop-<i>``): `worker:<i>/closures_done`. The wrapper costs
  a thread-local lookup and a dict update per closure.
* ``workers[i]._on_closure_failure``, ``._on_resource_closure_failure`` and
  ``._on_worker_recovery``, which run only when a worker fails or comes back: exact failure
  and recovery counts. Where they cannot be installed, polling ``_is_dead_with_error``
  counts the transitions it sees instead.

Once per return of a failed worker, the first closure it finishes afterwards is reported as
`worker:<i>/resumed` (the returns so far), stamped with the wall time at which that closure
finished rather than the poll's: the moment the worker is training again, to the
millisecond, where the once-a-second counts would only bound it.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.runtime.sink import MetricSink

log = logging.getLogger("strata.runtime")

POLL_INTERVAL = 1.0
HEARTBEAT = 10.0  # an unchanged value is still reported this often
WORKER_THREAD = re.compile(r"^WorkerClosureProcessingLoop-(\d+)$")
_COUNTERS_ATTR = "_strata_counters"


class Counters:
    """What the wrappers count; shared by every poller of one coordinator."""

    def __init__(self) -> None:
        # (worker index or None, thread ident) -> closures finished by that thread. One key
        # per thread, so each thread only ever writes its own entry.
        self.done: dict[tuple[int | None, int], int] = {}
        self.failures: dict[int, int] = {}
        self.recoveries: dict[int, int] = {}
        self.down: set[int] = set()
        # Workers back from a failure that have not finished a closure since, and the wall
        # time at which those that have did (taken by the poller).
        self.returning: set[int] = set()
        self.resumed: dict[int, float] = {}
        self.wrapped_workers: set[int] = set()
        self._lock = threading.Lock()
        self._local = threading.local()

    def finished(self) -> None:
        # Hot path (once per closure, on the worker's closure thread): a thread-local lookup
        # and a dict update.
        local = self._local
        key = getattr(local, "key", None)
        if key is None:
            thread = threading.current_thread()
            match = WORKER_THREAD.match(thread.name)
            key = local.key = (int(match.group(1)) if match else None, threading.get_ident())
        done = self.done
        done[key] = done.get(key, 0) + 1
        if self.returning and key[0] in self.returning:  # rare: just after a worker's return
            with self._lock:
                if key[0] in self.returning:
                    self.returning.discard(key[0])
                    self.resumed[key[0]] = time.time()

    def done_by_worker(self) -> tuple[int, dict[int, int]]:
        """(all closures finished, those finished per worker index)."""
        total = 0
        per_worker: dict[int, int] = {}
        for (worker, _), count in dict(self.done).items():
            total += count
            if worker is not None:
                per_worker[worker] = per_worker.get(worker, 0) + count
        return total, per_worker

    def failed(self, worker: int) -> None:
        with self._lock:
            if worker not in self.down:
                self.down.add(worker)
                self.failures[worker] = self.failures.get(worker, 0) + 1

    def recovered(self, worker: int) -> None:
        with self._lock:
            if worker in self.down:
                self.down.discard(worker)
                self.recoveries[worker] = self.recoveries.get(worker, 0) + 1
                self.returning.add(worker)

    def take_resumed(self) -> list[tuple[int, float]]:
        """(worker, wall time of its first closure after a return) not taken before."""
        with self._lock:
            taken = sorted(self.resumed.items())
            self.resumed.clear()
        return taken


def instrument(coordinator: Any) -> Counters:
    """Installs the counting wrappers on a coordinator (once); returns its counters."""
    counters = Counters()
    try:
        queue = coordinator._cluster.closure_queue
    except Exception as exc:
        log.debug("strata: cannot instrument the coordinator's closure queue: %r", exc)
        return counters
    existing = getattr(queue, _COUNTERS_ATTR, None)
    if isinstance(existing, Counters):
        return existing
    try:
        original_finished = queue.mark_finished

        def mark_finished(*args: Any, **kwargs: Any) -> Any:
            result = original_finished(*args, **kwargs)
            counters.finished()
            return result

        queue.mark_finished = mark_finished
        setattr(queue, _COUNTERS_ATTR, counters)
    except Exception as exc:
        log.debug("strata: cannot count finished closures: %r", exc)
    try:
        workers = list(coordinator._cluster.workers)
    except Exception as exc:
        log.debug("strata: cannot see the coordinator's workers: %r", exc)
        workers = []
    for worker in workers:
        try:
            _wrap_worker(worker, counters)
        except Exception as exc:
            log.debug("strata: cannot watch worker failures: %r", exc)
    return counters


def _wrap_worker(worker: Any, counters: Counters) -> None:
    index = int(worker.worker_index)
    for name in ("_on_closure_failure", "_on_resource_closure_failure"):
        original = getattr(worker, name)

        def on_failure(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            try:
                return _original(*args, **kwargs)
            finally:
                counters.failed(index)  # after the original has marked the worker dead

        setattr(worker, name, on_failure)
    original_recovery = worker._on_worker_recovery

    def on_recovery(*args: Any, **kwargs: Any) -> Any:
        result = original_recovery(*args, **kwargs)
        counters.recovered(index)  # after: the original marks the worker up
        return result

    worker._on_worker_recovery = on_recovery
    counters.wrapped_workers.add(index)


class CoordinatorHealth:
    """Polls one coordinator about once a second and reports what changed (see the module)."""

    def __init__(
        self,
        coordinator: Any,
        sink: MetricSink,
        step: Callable[[], int],
        *,
        interval: float = POLL_INTERVAL,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        self._coordinator = weakref.ref(coordinator)
        self._sink = sink
        self._step = step
        self._interval = interval
        self._heartbeat = heartbeat
        self.counters = instrument(coordinator)
        self._last: dict[str, tuple[float, float]] = {}  # name -> (value, when reported)
        self._missing: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="strata-coordinator-health", daemon=True
            )
            self._thread.start()

    def stop(self, final_poll: bool = True) -> None:
        self._stop.set()
        if final_poll:
            self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll()

    def poll(self) -> None:
        try:
            values = self.sample()
            if not values:
                return
            step = max(0, int(self._step()))
            now = time.monotonic()
            wall = time.time()
            for name, value in values.items():
                last = self._last.get(name)
                if last is not None and last[0] == value and now - last[1] < self._heartbeat:
                    continue
                self._last[name] = (value, now)
                self._sink.put(name, value, step, wall)
            for index, at in self.counters.take_resumed():
                returns = float(self.counters.recoveries.get(index, 0))
                self._sink.put(f"worker:{index}/resumed", returns, step, at)
        except Exception as exc:
            self._once("poll", exc)

    def sample(self) -> dict[str, float]:
        """The current values, by metric name; what cannot be read is left out."""
        coordinator = self._coordinator()
        if coordinator is None:
            return {}
        out: dict[str, float] = {}
        cluster = self._read("cluster", lambda: coordinator._cluster)
        if cluster is None:
            return out
        queue = self._read("closure_queue", lambda: cluster.closure_queue)
        if queue is not None:
            depth = self._read("queue_depth", lambda: queue._queue.qsize())
            if depth is not None:
                out["coordinator/queue_depth"] = float(depth)
            inflight = self._read("inflight", lambda: queue.inflight_closure_count)
            if inflight is not None:
                out["coordinator/inflight"] = float(inflight)

        counters = self.counters
        workers = self._read("workers", lambda: list(cluster.workers)) or []
        up_count = 0
        seen_state = False
        for worker in workers:
            index = self._read("worker_index", functools.partial(getattr, worker, "worker_index"))
            if not isinstance(index, int):
                continue
            dead = self._read(
                "worker_state", functools.partial(getattr, worker, "_is_dead_with_error")
            )
            if dead is not None or hasattr(worker, "_is_dead_with_error"):
                seen_state = True
                is_up = not dead
                if index not in counters.wrapped_workers:
                    # No wrappers on this worker: count the transitions that polling sees.
                    if is_up:
                        counters.recovered(index)
                    else:
                        counters.failed(index)
                up_count += int(is_up)
                out[f"worker:{index}/up"] = float(is_up)
            out[f"worker:{index}/failures"] = float(counters.failures.get(index, 0))
        if seen_state:
            out["coordinator/workers_up"] = float(up_count)
        if workers:
            out["coordinator/worker_failures"] = float(sum(counters.failures.values()))
            out["coordinator/worker_recoveries"] = float(sum(counters.recoveries.values()))

        if queue is not None and getattr(queue, _COUNTERS_ATTR, None) is counters:
            total, per_worker = counters.done_by_worker()
            out["coordinator/closures_done"] = float(total)
            for worker in workers:
                index = getattr(worker, "worker_index", None)
                if isinstance(index, int):
                    out[f"worker:{index}/closures_done"] = float(per_worker.get(index, 0))
        return out

    def _read(self, what: str, read: Callable[[], Any]) -> Any:
        if what in self._missing:
            return None
        try:
            return read()
        except Exception as exc:
            self._missing.add(what)
            self._once(what, exc)
            return None

    def _once(self, what: str, exc: BaseException) -> None:
        key = f"logged:{what}"
        if key not in self._missing:
            self._missing.add(key)
            log.debug("strata: coordinator metric %s unavailable: %r", what, exc)
