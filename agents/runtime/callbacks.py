"""The Keras callback that streams a job's metrics: `StrataMetrics`, whose hooks drive a
`MetricsTracker` (agents.runtime.metrics_tracker says what it reports and when), and
`make_callbacks`, what `runtime.callbacks()` returns.

This module imports only the standard library: `agents.runtime` imports it eagerly (so that
the package's `callbacks()` function, defined after that import, is never shadowed by this
module), tf_keras is imported when the class is first used (`StrataMetrics` is built on
attribute access), and the sender with its pydantic protocol on the first report.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agents.runtime import values as tfvalues
from agents.runtime.metrics_tracker import (
    BATCH_INTERVAL,
    THROUGHPUT_INTERVAL,
    MetricsTracker,
)

if TYPE_CHECKING:
    from agents.runtime.sink import MetricSink

log = logging.getLogger("strata.runtime")

__all__ = ["MetricsTracker", "learning_rate", "make_callbacks", "strata_metrics_class"]


def learning_rate(model: Any, step: int) -> float | None:
    """The optimizer's learning rate at `step`: a schedule is evaluated locally."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return None
    # tf_keras's optimizer keeps a schedule in `_learning_rate` (its `learning_rate` property
    # returns the last applied value, a variable on the parameter servers under PS).
    rate: Any = getattr(optimizer, "_learning_rate", None)
    if rate is None or not _is_schedule(rate):
        rate = getattr(optimizer, "learning_rate", None)
        if rate is None:
            rate = getattr(optimizer, "lr", None)
    if _is_schedule(rate):
        rate = rate(step)
    return tfvalues.to_float(rate)


def trained_step(model: Any) -> int | None:
    """The optimizer's iteration count, outside ParameterServerStrategy (where it is remote).

    For evaluations outside `fit`: the sidecar evaluator restores it with each checkpoint.
    """
    if getattr(model, "_cluster_coordinator", None) is not None:
        return None
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    value = tfvalues.to_float(iterations) if iterations is not None else None
    return int(value) if value is not None and value >= 0 else None


def _is_schedule(value: object) -> bool:
    return callable(value) and hasattr(value, "get_config") and not hasattr(value, "numpy")


def _make_class() -> type:
    import tf_keras as keras

    class StrataMetrics(keras.callbacks.Callback):  # type: ignore[misc]
        """Streams training metrics to the Strata server (see `agents.runtime.callbacks`)."""

        def __init__(
            self,
            batch_size: int | None = None,
            *,
            sink: MetricSink | None = None,
            batch_interval: float = BATCH_INTERVAL,
            throughput_interval: float = THROUGHPUT_INTERVAL,
            watch_coordinator: bool = True,
        ) -> None:
            super().__init__()
            # Batch hooks get the raw logs (tensors, or RemoteValues under PS, where batch
            # hooks of a callback without this flag are refused altogether).
            self._supports_tf_logs = True
            self.tracker = MetricsTracker(
                batch_size,
                sink=sink,
                batch_interval=batch_interval,
                throughput_interval=throughput_interval,
                watch_coordinator=watch_coordinator,
            )
            self._release_sigterms: Callable[[], None] | None = None

        def _guard(self, hook: str, call: Callable[[], object]) -> None:
            try:
                call()
            except Exception as exc:  # reporting must never break training
                log.debug("strata: %s failed: %r", hook, exc)

        def on_train_begin(self, logs: Any = None) -> None:
            from agents.runtime.step_reads import keep_reads_local

            self._guard("on_train_begin", lambda: keep_reads_local(self.model))
            self._guard("on_train_begin", self._hold_outside_sigterms)
            coordinator = getattr(self.model, "_cluster_coordinator", None)
            self._guard(
                "on_train_begin", lambda: self.tracker.train_begin(self.params or {}, coordinator)
            )

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._guard(
                "on_epoch_begin",
                lambda: self.tracker.epoch_begin(epoch, lambda: trained_step(self.model)),
            )

        # The two per-batch hooks are the hot path: no closures, no logging setup.
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            tracker = self.tracker
            if tracker.epoch_started:
                return
            try:
                tracker.batch_begin(batch)
            except Exception as exc:
                log.debug("strata: on_train_batch_begin failed: %r", exc)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            try:
                self.tracker.batch_end(batch, logs)
            except Exception as exc:
                log.debug("strata: on_train_batch_end failed: %r", exc)

        def on_test_begin(self, logs: Any = None) -> None:
            self._guard("on_test_begin", self.tracker.test_begin)

        def on_test_end(self, logs: Any = None) -> None:
            self._guard(
                "on_test_end",
                lambda: self.tracker.test_end(logs, lambda: trained_step(self.model)),
            )

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._guard(
                "on_epoch_end",
                lambda: self.tracker.epoch_end(
                    epoch, logs, lambda step: learning_rate(self.model, step)
                ),
            )

        def on_train_end(self, logs: Any = None) -> None:
            self._guard("on_train_end", self.tracker.train_end)
            release, self._release_sigterms = self._release_sigterms, None
            if release is not None:
                self._guard("on_train_end", release)

        def _hold_outside_sigterms(self) -> None:
            """While it trains, the chief outlives a SIGTERM its agent did not send, to take
            the notice's checkpoint (agents.runtime.stop_signals). Not under
            multi_worker_mirrored: there any SIGTERM already backs up at the next step."""
            from agents.environment import TaskEnvironment
            from agents.runtime.stop_signals import hold_outside_sigterms
            from agents.vocabulary import Strategy

            strategy = os.environ.get(TaskEnvironment.variable("strategy"))
            if self._release_sigterms is None and strategy != Strategy.multi_worker_mirrored:
                task = os.environ.get(TaskEnvironment.variable("task"), "the chief")
                self._release_sigterms = hold_outside_sigterms(task)

    return StrataMetrics


_class: type | None = None
_class_lock = threading.Lock()


def strata_metrics_class() -> type:
    """The `StrataMetrics` class (a tf_keras Callback), built on first use."""
    global _class
    with _class_lock:
        if _class is None:
            _class = _make_class()
        return _class


def make_callbacks(batch_size: int | None = None, *, sink: MetricSink | None = None) -> list[Any]:
    """What `runtime.callbacks()` returns: [KerasGuard, StrataWarmStart, StrataBackup,
    StrataMetrics, StrataCheckpoints, StrataExport].

    KerasGuard (under Strata) stops the task for good when the model is Keras 3 and the
    strategy one Keras 3 cannot train with (`agents.runtime.flavor`). StrataMetrics when
    reporting is on; BackupAndRestore and StrataCheckpoints when the job
    has a checkpoint dir (STRATA_CHECKPOINT_DIR; see `agents.runtime.checkpoints`). Outside
    Strata that is []. BackupAndRestore comes first: its on_train_begin restores the weights,
    the optimizer (its step) and the epoch counter before any other callback looks at them.
    StrataWarmStart and StrataExport only when the spec asks for them
    (checkpoint.warm_start_from, export).
    """
    from agents.runtime.checkpoints import checkpoint_callbacks
    from agents.runtime.export import export_callback
    from agents.runtime.flavor import keras_guard
    from agents.runtime.process_sink import get_sender
    from agents.runtime.warm_start import warm_start_callback

    target = sink if sink is not None else get_sender()
    checkpoints = checkpoint_callbacks(target)
    callbacks: list[Any] = []
    if target.enabled or checkpoints is not None:
        callbacks.append(keras_guard())
    # Before the backup: a task that has one resumes from it instead (agents.runtime.warm_start).
    warm = warm_start_callback()
    if warm is not None:
        callbacks.append(warm)
    if checkpoints is not None:
        callbacks.append(checkpoints[0])
    if target.enabled:
        callbacks.append(strata_metrics_class()(batch_size, sink=sink))
    if checkpoints is not None:
        callbacks.append(checkpoints[1])
    # Last: the final checkpoint is written before the export (agents.runtime.export).
    export = export_callback(target)
    if export is not None:
        callbacks.append(export)
    return callbacks


def __getattr__(name: str) -> Any:
    if name == "StrataMetrics":
        return strata_metrics_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
