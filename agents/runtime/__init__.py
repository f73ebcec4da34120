"""The Strata runtime: what a training script imports.

    from agents import runtime

    strategy = runtime.strategy()
    with strategy.scope():
        model = build_model()
        model.compile(...)
    model.fit(..., callbacks=runtime.callbacks())

and, in the job's sidecar evaluator task (`runtime.role() == "evaluator"`), with the same
compiled model and a finite evaluation dataset: `runtime.sidecar_evaluator(model, data)`.

Importing this package is cheap: TensorFlow is imported only when `strategy()` is called,
tf_keras when `callbacks()` is, and the metric sender (a daemon thread with a websocket to
the server, see `agents.runtime.sender`) on the first report. A plain tf_keras script that
never imports it still runs under Strata; it just streams no metrics beyond its own logs. A
script run by hand, outside Strata, reports nothing (`callbacks()` is then empty).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from agents.environment import prefer_tf_keras
from agents.runtime import callbacks as _callbacks_module  # noqa: F401  (see callbacks())
from agents.runtime import cluster
from agents.runtime.cluster import ClusterConfigError, StrategyName, strategy_name
from agents.runtime.strategy import Strategy, build_strategy, default_strategy
from agents.vocabulary import Role

# Before anything here imports TensorFlow; a value the user chose is left alone.
prefer_tf_keras(os.environ)

__all__ = [
    "ClusterConfigError",
    "Strategy",
    "StrategyName",
    "callbacks",
    "connect",
    "disconnect",
    "flush",
    "report",
    "role",
    "sidecar_evaluator",
    "strategy",
    "strategy_name",
    "watch_coordinator",
]

log = logging.getLogger("strata.runtime")

_strategy: Strategy | None = None


def role() -> str:
    """This task's role in its job: "chief", "worker", "ps" or "evaluator"."""
    return cluster.role()


def strategy() -> Strategy:
    """The job's tf.distribute strategy, built on the first call and the same one afterwards.

    TensorFlow allows one multi-worker strategy per process, so the strategy is built once.
    Under parameter_server a worker or ps task that runs this script by hand serves its gRPC
    server here and never returns (the TF pattern); under Strata the agent runs
    `python -m agents.runtime.server` for those tasks instead. The sidecar evaluator is not in
    the training cluster and gets the default (single-device) strategy.
    """
    global _strategy
    if _strategy is None:
        _strategy = _build_strategy()
    return _strategy


def _build_strategy() -> Strategy:
    from agents.runtime.stacks import install

    install()  # before joining the cluster, which may hang too
    task_role = cluster.role()
    if task_role == Role.evaluator:
        return default_strategy()
    name = strategy_name()
    config = cluster.tf_config()
    serves_only = task_role in (Role.worker, Role.ps)
    if name == StrategyName.parameter_server and serves_only and config is not None:
        from agents.runtime.server import serve

        serve(config)
    try:
        return build_strategy(name, config)
    except RuntimeError as exc:
        if "at program startup" not in str(exc):
            raise
        # MultiWorkerMirroredStrategy configures collective ops, which TensorFlow allows
        # only before its context is initialized: no restart can change that.
        from agents.runtime.flavor import keras3_cannot, keras3_imported
        from agents.runtime.refusal import refuse

        if keras3_imported():
            refuse(keras3_cannot(name))
        refuse(
            f"TensorFlow was used before runtime.strategy() built the {name} strategy, "
            f"which must configure TensorFlow at program startup ({exc}): call "
            "runtime.strategy() before building a model or running any TensorFlow op"
        )


def connect(job: Any, **options: Any) -> Strategy:
    """Coordinate a parameter_server job submitted with ``coordinator: client`` from this
    process (a notebook kernel, a script anywhere): the job's ParameterServerStrategy.

    `job` is its id, or a spec to submit. Waits until its workers and ps serve, attaches as
    its one client (``take_over=True`` replaces another), and makes `callbacks()` report,
    checkpoint and back up as a chief's would. ``resume=False`` starts a new model instead
    of resuming from the last client's backup; ``checkpoint_dir=`` writes elsewhere than
    the job's dir; `address=` and `port=` say where the job's ps reach this process (they
    do when a checkpoint is written; default: its address towards the workers, a free
    port); `server` and `token` default to STRATA_SERVER and STRATA_TOKEN. See
    `agents.runtime.client` and docs/client_mode.md.
    """
    global _strategy
    from agents.runtime.client import connect as attach

    _strategy = attach(job, **options).strategy
    return _strategy


def disconnect() -> None:
    """Detach from the job this process coordinates; its workers and ps keep serving."""
    from agents.runtime.client import disconnect as detach

    detach()


def callbacks(batch_size: int | None = None) -> list[Any]:
    """The Keras callbacks to pass to `model.fit`.

    (The submodule `agents.runtime.callbacks`, imported at the top of this file, would
    otherwise be bound to this name: this function, defined after it, wins.)

    `StrataMetrics` streams the epoch-end logs, the learning rate, batch-level progress and
    throughput (`examples_per_sec` too when `batch_size`, the global batch size, is given)
    and, under parameter_server, the coordinator's health. With the job's checkpoint dir,
    `BackupAndRestore` (first: a restarted chief resumes at the epoch after its last backup)
    and `StrataCheckpoints` (checkpoints by the job's policy and on request, see
    `agents.runtime.checkpoints`) come too. A Keras 3 script under multi_worker_mirrored or
    parameter_server, where Keras 3 cannot train, is stopped here for good with a message that
    says so (`agents.runtime.refusal`). Outside Strata (no STRATA_SERVER and friends, no
    STRATA_CHECKPOINT_DIR) this is an empty list, so scripts can always pass it.
    """
    from agents.runtime.flavor import keras3_script_refusal

    # A client's process is the user's own: it may have imported tf_keras before this
    # package set tf.keras to it, which imports Keras 3 too, so that tells nothing there.
    client = cluster.task_environment().client_session is not None
    reason = None if client else keras3_script_refusal(strategy_name())
    if reason is not None:
        from agents.runtime.refusal import refuse

        refuse(reason)  # the task stops here, for good: no restart could make it train
    try:
        from agents.runtime.callbacks import make_callbacks

        return make_callbacks(batch_size)
    except Exception as exc:  # reporting must never stop a job from training
        log.warning("strata: metric callbacks disabled: %r", exc)
        return []


def sidecar_evaluator(model: Any, data: Any, steps: int | None = None) -> None:
    """The job's sidecar evaluator: evaluates each new checkpoint and reports ``eval/<name>``
    at the checkpoint's step, until the agent stops the process (it never returns). Stopped,
    it first evaluates the newest checkpoint if it has not reported it yet: the final one,
    when training has ended.

    `model` is built and compiled as for training (same layers, optimizer and metrics);
    `data` is what `model.evaluate` takes, finite unless `steps` is given. Outside Strata
    (no STRATA_CHECKPOINT_DIR) it raises `NotUnderStrata`, a RuntimeError.
    """
    from agents.runtime.evaluator import run_sidecar_evaluator

    run_sidecar_evaluator(model, data, steps)


def report(name: str, value: Any, step: int) -> None:
    """Reports a custom scalar at a training step; cheap, never blocks, never raises.

    `value` may be a number, a tensor or, under parameter_server, the `RemoteValue` that
    `coordinator.schedule` returned: tensors and remote values are resolved on a background
    thread and reported once their step has run. Does nothing outside Strata.
    """
    from agents.runtime.reporting import report as _report

    _report(name, value, step)


def watch_coordinator(coordinator: Any) -> None:
    """For custom loops under parameter_server: report the `ClusterCoordinator`'s health
    (queue depth, closures in flight and done per worker, worker failures and recoveries)
    about once a second, at the last step passed to `report()`."""
    from agents.runtime.reporting import watch_coordinator as _watch

    _watch(coordinator)


def flush(timeout: float = 5.0) -> bool:
    """Waits until every reported point is stored by the server (True), or `timeout` passes.

    A process flushes for up to 5 seconds by itself when it exits.
    """
    from agents.runtime.process_sink import get_sender

    try:
        return get_sender().flush(timeout)
    except Exception:
        return False
