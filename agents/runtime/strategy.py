"""Builds the job's `tf.distribute` strategy from STRATA_STRATEGY and TF_CONFIG.

TensorFlow is imported inside the functions only: importing it costs seconds and hundreds of
megabytes, and `agents.runtime` is imported by code that never trains.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TypeAlias

from agents.environment import prefer_tf_keras
from agents.runtime.cluster import StrategyName, TFConfig
from agents.vocabulary import Role

# tf.distribute.Strategy; TensorFlow ships no type information, so to mypy it is Any anyway.
Strategy: TypeAlias = Any

# Under parameter_server a variable is split across the ps tasks once it is this large; small
# models stay whole, which keeps every step to one round trip per variable.
MIN_SHARD_BYTES = 256 << 10


def import_tensorflow() -> Any:
    """Imports TensorFlow with tf_keras as its Keras (Keras 3 cannot fit under PSS)."""
    prefer_tf_keras(os.environ)
    import tensorflow as tf

    return tf


def build_strategy(name: StrategyName, config: TFConfig | None) -> Strategy:
    """A new strategy of the given kind for this task (a strategy can be built once a process).

    The cluster comes from TF_CONFIG through TFConfigClusterResolver, exactly as TensorFlow
    would read it; `config` is our own parse of the same variable, for the log line and the
    number of ps tasks.
    """
    tf = import_tensorflow()
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
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    num_ps = len(config.cluster.get(Role.ps, ()))
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=MIN_SHARD_BYTES, max_shards=max(num_ps, 1)
    )
    return tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def default_strategy() -> Strategy:
    """The no-op strategy, for tasks outside the training cluster (the sidecar evaluator)."""
    return import_tensorflow().distribute.get_strategy()
