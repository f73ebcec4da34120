"""Turning TensorFlow results into plain floats, off the training thread.

Training code hands the runtime tensors, numpy values or, under ParameterServerStrategy,
`RemoteValue`s whose closures may still be queued on the coordinator. Converting any of
them on the training thread can block it (a RemoteValue until its step has run, a GPU
tensor until the device catches up), so the runtime converts them on its own threads with
these helpers. Nothing here imports TensorFlow: the values bring their own methods.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping

log = logging.getLogger("strata.runtime")

WAIT_SLICE = 0.25  # seconds; how often a wait for a RemoteValue checks for a stop request


def sanitize_name(name: str) -> str:
    """A metric name the protocol accepts: other characters become "_", cut at 128."""
    cleaned = re.sub(r"[^A-Za-z0-9_.:/\-]", "_", str(name))[:128]
    return cleaned or "_"


def is_remote_value(value: object) -> bool:
    """A tf.distribute coordinator RemoteValue (duck-typed: fetch() and no numpy())."""
    return callable(getattr(value, "fetch", None)) and not hasattr(value, "numpy")


def wait_ready(value: object, stop: threading.Event | None = None) -> bool:
    """Waits until a RemoteValue's closure has finished (or failed); False if stopped first.

    Uses the value's internal "status available" event so that the wait can be given up;
    without it (another TF version), `fetch()` itself waits when the caller resolves it.
    """
    if not is_remote_value(value):
        return True
    event = getattr(value, "_status_available_event", None)
    if not isinstance(event, threading.Event):
        return True
    while not event.wait(WAIT_SLICE):
        if stop is not None and stop.is_set():
            return False
    return True


def resolve(value: object) -> object:
    """Fetches a RemoteValue (which blocks until it is ready); other values pass through."""
    if is_remote_value(value):
        return value.fetch()  # type: ignore[attr-defined]
    return value


def to_float(value: object) -> float | None:
    """A scalar as a float; None for anything that is not a single number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    try:
        if hasattr(value, "numpy"):
            value = value.numpy()
        size = getattr(value, "size", 1)
        if size != 1:
            return None
        if hasattr(value, "item"):
            value = value.item()
        return float(value)  # type: ignore[arg-type]
    except Exception:
        return None


def scalars(value: object) -> dict[str, float]:
    """The scalar entries of a (resolved) logs mapping, as floats."""
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, float] = {}
    for key, item in value.items():
        number = to_float(item)
        if number is not None:
            out[str(key)] = number
    return out


class ValueQueue:
    """A daemon thread that resolves values in order and hands each to a callback.

    `submit()` is cheap and never blocks: a bounded deque append. When more than `limit`
    values wait, the oldest is dropped (and counted). Values that fail to resolve (a closure
    that failed or was cancelled) are skipped.
    """

    def __init__(self, name: str, limit: int = 10_000) -> None:
        self._name = name
        self._items: deque[tuple[object, Callable[[object], None]]] = deque()
        self._limit = limit
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dropped = 0
        self.failed = 0

    def submit(self, value: object, callback: Callable[[object], None]) -> None:
        with self._lock:
            if len(self._items) >= self._limit:
                self._items.popleft()
                self.dropped += 1
            self._items.append((value, callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._wake.set()

    def idle(self) -> bool:
        return not self._items

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                item = self._items.popleft() if self._items else None
                if item is None:
                    self._wake.clear()
            if item is None:
                self._wake.wait(1.0)
                continue
            value, callback = item
            try:
                if not wait_ready(value, self._stop):
                    return
                callback(resolve(value))
            except Exception as exc:
                self.failed += 1
                log.debug("strata: a reported value could not be resolved: %r", exc)
