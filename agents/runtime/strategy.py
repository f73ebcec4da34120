"""Builds the job's `tf.distribute` strategy from STRATA_STRATEGY and TF_CONFIG.

TensorFlow is imported inside the functions only: importing it costs seconds and hundreds of
megabytes, and `agents.runtime` is imported by code that never trains.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TypeAlias

from agents.environment import prefer_tf_keras
from agents.options import DEFAULT_MIN_SHARD_BYTES, StrategyOptions
from agents.runtime.cluster import StrategyName, TFConfig, task_environment
from agents.vocabulary import Role

# tf.distribute.Strategy; TensorFlow ships no type information, so to mypy it is Any anyway.
Strategy: TypeAlias = Any

# Under parameter_server a variable is split across the ps tasks once it is this large; small
# models stay whole, which keeps every step to one round trip per variable. The spec's
# strategy_options.partitioner changes it (and the number of shards, one per ps by default).
MIN_SHARD_BYTES = DEFAULT_MIN_SHARD_BYTES


def import_tensorflow() -> Any:
    """Imports TensorFlow with tf_keras as its Keras (Keras 3 cannot fit under PSS)."""
    prefer_tf_keras(os.environ)
    import tensorflow as tf

    return tf


def strategy_options(raw: str | None = None) -> StrategyOptions:
    """The job's strategy options (STRATA_STRATEGY_OPTIONS, or `raw`); none when unset.

    The server validated them against the strategy; a value this runtime cannot read (a
    newer server's, a hand-set one) is reported and ignored rather than stopping training.
    """
    if raw is None:
        raw = task_environment().strategy_options
    if raw is None:
        return StrategyOptions()
    try:
        return StrategyOptions.model_validate_json(raw)
    except ValueError as exc:
        print(f"strata: ignoring STRATA_STRATEGY_OPTIONS={raw!r}: {exc}", file=sys.stderr)
        return StrategyOptions()


def communication_options(options: StrategyOptions) -> Any:
    """tf.distribute.experimental.CommunicationOptions for multi_worker_mirrored."""
    tf = import_tensorflow()
    implementation = tf.distribute.experimental.CommunicationImplementation[
        (options.communication or "auto").upper()
    ]
    return tf.distribute.experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=options.collective_timeout
    )


def variable_partitioner(options: StrategyOptions, num_ps: int) -> Any:
    """The MinSizePartitioner of parameter_server: the spec's bounds, else the defaults."""
    tf = import_tensorflow()
    chosen = options.partitioner
    min_shard_bytes = chosen.min_shard_bytes if chosen is not None else MIN_SHARD_BYTES
    max_shards = chosen.max_shards if chosen is not None else None
    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=min_shard_bytes, max_shards=max_shards or max(num_ps, 1)
    )


def build_strategy(
    name: StrategyName, config: TFConfig | None, options: StrategyOptions | None = None
) -> Strategy:
    """A new strategy of the given kind for this task (a strategy can be built once a process).

    The cluster comes from TF_CONFIG through TFConfigClusterResolver, exactly as TensorFlow
    would read it; `config` is our own parse of the same variable, for the log line and the
    number of ps tasks. `options` are the spec's strategy_options (default: from the
    environment).
    """
    tf = import_tensorflow()
    if options is None:
        options = strategy_options()
    if name == StrategyName.mirrored:
        # One process, all its local devices; TF_CONFIG (a one-task cluster) is not consulted.
        return tf.distribute.MirroredStrategy()
    if config is None:
        raise RuntimeError(f"strategy {name} needs TF_CONFIG to describe the cluster")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # Both multi-worker strategies block in their constructor, silently and possibly for
    # minutes, until the rest of the cluster answers; say what this task is waiting for.
    sizes = ", ".join(f"{len(addrs)} {role}" for role, addrs in config.cluster.items())
    print(
        f"strata: {config.task_type}:{config.task_index} joining the {name} cluster ({sizes})",
        file=sys.stderr,
        flush=True,
    )
    if name == StrategyName.multi_worker_mirrored:
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=communication_options(options)
        )
    num_ps = len(config.cluster.get(Role.ps, ()))
    partitioner = variable_partitioner(options, num_ps)
    return tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def default_strategy() -> Strategy:
    """The no-op strategy, for tasks outside the training cluster (the sidecar evaluator)."""
    return import_tensorflow().distribute.get_strategy()
