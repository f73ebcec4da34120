"""The Strata runtime: what a training script imports.

    from agents import runtime

    strategy = runtime.strategy()
    with strategy.scope():
        model = build_model()
        model.compile(...)
    model.fit(..., callbacks=runtime.callbacks())

Importing this package is cheap: TensorFlow is imported only when `strategy()` is called.
A plain tf_keras script that never imports it still runs under Strata; it just streams no
metrics beyond its own logs.
"""

from __future__ import annotations

import os
from typing import Any

from agents.runtime import cluster
from agents.runtime.cluster import ClusterConfigError, StrategyName, strategy_name
from agents.runtime.strategy import Strategy, build_strategy, default_strategy

# tf.keras must resolve to tf_keras (Keras 3 cannot fit under ParameterServerStrategy). Set
# before anything here imports TensorFlow; a value the user chose is left alone.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__all__ = [
    "ClusterConfigError",
    "Strategy",
    "StrategyName",
    "callbacks",
    "role",
    "strategy",
    "strategy_name",
]

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
    task_role = cluster.role()
    if task_role == "evaluator":
        return default_strategy()
    name = strategy_name()
    config = cluster.tf_config()
    if name == "parameter_server" and task_role in ("worker", "ps") and config is not None:
        from agents.runtime.server import serve

        serve(config)
    return build_strategy(name, config)


def callbacks() -> list[Any]:
    """The Keras callbacks to pass to `model.fit`.

    The runtime's streaming callbacks (metrics to the server, control commands, checkpoint
    backups) are added here; until they exist this is an empty list, so scripts can already
    pass it.
    """
    return []
