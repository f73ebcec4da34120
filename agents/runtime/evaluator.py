"""The sidecar evaluator: evaluates each new checkpoint of the job and reports the results.

`run_sidecar_evaluator` runs `tf_keras.utils.SidecarEvaluator` over the job's checkpoint dir
(STRATA_CHECKPOINT_DIR): it waits for a checkpoint newer than the last one it evaluated
(the ``checkpoint`` state file that `StrataCheckpoints` keeps), restores the model and the
optimizer from it, runs `model.evaluate` and starts over, until the process is stopped.
The reports come from the same `StrataMetrics` callback as in training: at the end of an
evaluation outside `fit` it reports ``eval/<name>`` at the optimizer's iteration count, which
the restore has just set to the checkpoint's step.

The evaluator is not part of the training cluster (the agent gives it a TF_CONFIG naming
only itself), so it runs under the default strategy. The agent stops it with SIGTERM; that
ends the loop cleanly (exit code 0) so that the last points are flushed.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agents.runtime.checkpoints import DIR_ENV, checkpoint_dir

if TYPE_CHECKING:
    from types import FrameType

    from agents.runtime.sender import MetricSink

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
    `steps` is given. Runs until the process is stopped, or, when `max_evaluations` is given,
    until it has evaluated a checkpoint ``ckpt-<N>`` with N >= max_evaluations (tests).
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
    import tf_keras as keras

    from agents.runtime.callbacks import strata_metrics_class

    reporter = strata_metrics_class()(sink=sink, watch_coordinator=False)
    evaluator = keras.utils.SidecarEvaluator(
        model,
        data,
        checkpoint_dir=directory,
        steps=steps,
        max_evaluations=max_evaluations,
        callbacks=[reporter],
    )
    log.info("strata: sidecar evaluator watching %s", directory)
    with _exit_on_sigterm():
        evaluator.start()


@contextlib.contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """SIGTERM raises SystemExit(0) (atexit handlers, the metric flush among them, run),
    unless the script installed its own handler or this is not the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("strata: sidecar evaluator stopped")
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
