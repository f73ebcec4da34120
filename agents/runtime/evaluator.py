"""The sidecar evaluator: evaluates each new checkpoint of the job and reports the results.

`run_sidecar_evaluator` runs `tf_keras.utils.SidecarEvaluator` (for a Keras 3 model, which has
none, the same loop of its own) over the job's checkpoint dir (STRATA_CHECKPOINT_DIR): it waits
for a checkpoint newer than the last one it evaluated (the ``checkpoint`` state file that
`StrataCheckpoints` keeps), restores the model and the optimizer from it, runs `model.evaluate`
and starts over, until the process is stopped.
The reports come from the same `StrataMetrics` callback as in training: at the end of an
evaluation outside `fit` it reports ``eval/<name>`` at the optimizer's iteration count, which
the restore has just set to the checkpoint's step.

The evaluator is not part of the training cluster (the agent gives it a TF_CONFIG naming
only itself), so it runs under the default strategy. The agent stops it with SIGTERM, most
often because training has ended: the chief has just written its final checkpoint, which the
loop may not have reached yet. So the first SIGTERM leaves the loop (mid-evaluation or while
waiting), evaluates the newest checkpoint unless its step was the last one reported, and
exits with code 0 so that the points are flushed; the agent's stop grace (SIGTERM → SIGKILL)
bounds that last evaluation, and a second SIGTERM exits at once. Only the end of an
evaluation, where its results are reported and its step recorded, holds the first SIGTERM
back until both are done: else that step could be reported twice, or never.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agents.runtime.checkpoints import DIR_ENV, checkpoint_dir
from agents.runtime.flavor import KerasFlavor, keras_flavor

if TYPE_CHECKING:
    from types import FrameType

    from agents.runtime.sink import MetricSink

log = logging.getLogger("strata.runtime")


class NotUnderStrata(RuntimeError):
    """The sidecar evaluator was asked for outside a Strata job (no checkpoint dir)."""


def run_sidecar_evaluator(
    model: Any,
    data: Any,
    steps: int | None = None,
    *,
    directory: str | None = None,
    sink: MetricSink | None = None,
    max_evaluations: int | None = None,
) -> None:
    """Evaluates `model` on `data` for each new checkpoint in the job's checkpoint dir.

    `model` must be built and compiled like the training model (same layers, same optimizer
    class, the metrics to report); `data` is anything `model.evaluate` takes, finite unless
    `steps` is given. Runs until SIGTERM, which evaluates the newest checkpoint and exits (see
    the module docstring), or, when `max_evaluations` is given, returns once it has evaluated
    a checkpoint ``ckpt-<N>`` with N >= max_evaluations (tests).
    """
    directory = directory or checkpoint_dir()
    if directory is None:
        raise NotUnderStrata(
            f"the sidecar evaluator evaluates a Strata job's checkpoints, but {DIR_ENV} is not "
            "set: run it as the job's evaluator task (replicas.evaluator.count: 1, or "
            f"POST /jobs/<id>/evaluator), or set {DIR_ENV} to a checkpoint dir"
        )
    if getattr(model, "optimizer", None) is None or not getattr(model, "_is_compiled", True):
        raise ValueError(
            "the sidecar evaluator needs a compiled model: build and compile it as for training "
            "(the optimizer restores the step, the compiled loss and metrics are reported)"
        )
    keras3 = keras_flavor(model) is KerasFlavor.keras3
    if keras3 and not model.optimizer.built:
        # Keras 3 creates optimizer variables in build(); a restore needs them to exist.
        model.optimizer.build(model.trainable_variables)
    log.info("strata: sidecar evaluator watching %s", directory)
    with _stop_on_sigterm() as sigterm:
        metrics = _evaluator_metrics_class()(sigterm, sink=sink, watch_coordinator=False)
        callbacks = [metrics]
        try:
            if keras3:
                _evaluate_each(model, data, steps, directory, callbacks, max_evaluations)
            else:
                import tf_keras as keras

                keras.utils.SidecarEvaluator(
                    model,
                    data,
                    checkpoint_dir=directory,
                    steps=steps,
                    max_evaluations=max_evaluations,
                    callbacks=callbacks,
                ).start()
            return
        except BaseException as exc:
            if not sigterm.ended(exc):
                raise
            log.info("strata: sidecar evaluator stopping; evaluating the newest checkpoint")
        _evaluate_newest(model, data, steps, directory, callbacks, metrics.evaluated_step)
        log.info("strata: sidecar evaluator stopped")
        raise SystemExit(0)  # atexit handlers, the metric flush among them, run


def _evaluate_each(
    model: Any,
    data: Any,
    steps: int | None,
    directory: str,
    callbacks: list[Any],
    max_evaluations: int | None,
) -> None:
    """SidecarEvaluator's loop for Keras 3, which has none (and whose `load_weights` reads no
    TF checkpoint): wait for a newer checkpoint, restore the model and the optimizer (its
    iteration count is the checkpoint's step), evaluate."""
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    for path in tf.train.checkpoints_iterator(directory):
        try:
            checkpoint.restore(path).expect_partial()
        except (tf.errors.NotFoundError, tf.errors.DataLossError) as exc:
            # Retention deleted it between the state file's update and this read.
            log.info("strata: skipping %s, which is gone: %r", path, exc)
            continue
        model.evaluate(data, steps=steps, callbacks=callbacks, verbose=2)
        number = path.rsplit("-", 1)[-1]
        if max_evaluations is not None and number.isdigit() and int(number) >= max_evaluations:
            return


class _Stopping(BaseException):
    """The first SIGTERM: leave SidecarEvaluator's loop wherever it is.

    A BaseException, so that no `except Exception` in tf_keras or the script swallows it.
    """


class _Sigterm:
    """The SIGTERM handler: the first raises `_Stopping`, a second SystemExit(0) (atexit
    handlers, the metric flush among them, run). A first one that lands inside `held()` is
    raised on leaving it instead, so that what the section does is done whole or not at all."""

    def __init__(self) -> None:
        self.received = 0
        self.holding = False
        self.deferred = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.received > 1:
            log.info("strata: sidecar evaluator stopped before its last evaluation ended")
            raise SystemExit(0)
        if self.holding:
            self.deferred = True
        else:
            raise _Stopping

    def ended(self, exc: BaseException) -> bool:
        """Whether `exc` is the first SIGTERM leaving the loop. `_Stopping` may reach us
        changed: raised while TensorFlow's C++ was building an error of its own, it comes out
        as pybind11's RuntimeError. So once the first SIGTERM came, any Exception is it."""
        if isinstance(exc, _Stopping):
            return True
        return self.received == 1 and isinstance(exc, Exception)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.deferred:
            self.deferred = False
            raise _Stopping


def _evaluator_metrics_class() -> type:
    from agents.runtime.callbacks import strata_metrics_class

    base: Any = strata_metrics_class()

    class EvaluatorMetrics(base):  # type: ignore[misc]
        """StrataMetrics that also remembers the step of the last evaluation it reported.
        The report and the record are one section for SIGTERM: a stop between them would
        evaluate (and report) that step again, or leave it unreported."""

        def __init__(self, sigterm: _Sigterm, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.sigterm = sigterm
            self.evaluated_step: int | None = None

        def on_test_end(self, logs: Any = None) -> None:
            with self.sigterm.held():
                super().on_test_end(logs)
                self.evaluated_step = int(self.model.optimizer.iterations.numpy())

    return EvaluatorMetrics


def _evaluate_newest(
    model: Any,
    data: Any,
    steps: int | None,
    directory: str,
    callbacks: list[Any],
    evaluated_step: int | None,
) -> None:
    """Restores the newest checkpoint and evaluates it, unless its step was the last one
    evaluated (its points are already reported)."""
    import tensorflow as tf

    newest = tf.train.latest_checkpoint(directory)
    if newest is None:
        return
    # What SidecarEvaluator restores for a tf_keras optimizer, and what StrataCheckpoints
    # writes: the model and the optimizer, whose iteration count is the checkpoint's step.
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).restore(newest).expect_partial()
    if int(model.optimizer.iterations.numpy()) == evaluated_step:
        return
    model.evaluate(data, steps=steps, callbacks=callbacks, verbose=2)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[_Sigterm]:
    """Installs a `_Sigterm` as the SIGTERM handler for the block; it is not installed (and so
    never fires) when the script has its own handler or this is not the main thread."""
    sigterm = _Sigterm()
    if threading.current_thread() is not threading.main_thread():
        yield sigterm
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield sigterm
        return
    signal.signal(signal.SIGTERM, sigterm)
    try:
        yield sigterm
    finally:
        signal.signal(signal.SIGTERM, previous)
