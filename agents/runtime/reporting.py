"""`runtime.report()` and `runtime.watch_coordinator()`: metrics from any training loop.

A number is queued for the sender at once. A tensor or a coordinator `RemoteValue` (a custom
loop under ParameterServerStrategy can report the value `coordinator.schedule` returned,
before it has run) is resolved on a background thread, in order, and reported when ready;
the training thread never waits for it.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import Any

from agents.runtime.coordinator import CoordinatorHealth
from agents.runtime.process_sink import get_sender
from agents.runtime.sink import MetricSink
from agents.runtime.values import ValueQueue, sanitize_name, to_float

log = logging.getLogger("strata.runtime")

_queue: ValueQueue | None = None
_lock = threading.Lock()
_last_step = 0
_watches: dict[int, CoordinatorHealth] = {}


def last_step() -> int:
    """The highest step passed to `report()` so far."""
    return _last_step


def _values() -> ValueQueue:
    global _queue
    if _queue is None:
        with _lock:
            if _queue is None:
                _queue = ValueQueue("strata-report")
    return _queue


def report(name: str, value: Any, step: int, *, sink: MetricSink | None = None) -> None:
    """Reports a scalar at a step; never blocks, never raises (see the module docstring)."""
    global _last_step
    try:
        target = sink if sink is not None else get_sender()
        if not target.enabled:
            return
        step = int(step)
        if step > _last_step:
            _last_step = step
        metric = sanitize_name(name)
        if isinstance(value, int | float):
            target.put(metric, float(value), step)
            return
        wall = time.time()

        def deliver(resolved: object) -> None:
            number = to_float(resolved)
            if number is not None:
                target.put(metric, number, step, wall)
            else:
                log.debug("strata: report(%r) got a value that is not a scalar", name)

        _values().submit(value, deliver)
    except Exception as exc:
        log.debug("strata: report(%r) failed: %r", name, exc)


def watch_coordinator(
    coordinator: Any, *, sink: MetricSink | None = None, interval: float = 1.0
) -> CoordinatorHealth | None:
    """Reports a ClusterCoordinator's health about once a second, at the last reported step.

    For custom training loops; `model.fit` does this through the callbacks. Watching the same
    coordinator twice returns the first watch. None when reporting is off.
    """
    try:
        target = sink if sink is not None else get_sender()
        if not target.enabled:
            return None
        with _lock:
            health = _watches.get(id(coordinator))
            if health is None:
                health = CoordinatorHealth(coordinator, target, last_step, interval=interval)
                _watches[id(coordinator)] = health
                health.start()
                # A last poll at exit, so that the final counts are reported too. Registered
                # after the sender's own exit hook (the sender exists by now), so it runs
                # before that hook flushes.
                atexit.register(health.stop, final_poll=True)
        return health
    except Exception as exc:
        log.debug("strata: cannot watch the coordinator: %r", exc)
        return None
