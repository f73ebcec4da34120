"""A custom training loop under ParameterServerStrategy, on scikit-learn's digits data set.

No `model.fit`: the chief schedules a `tf.function` that runs a few training steps on
whichever worker is free (`ClusterCoordinator.schedule`), and reports each call's loss with
`runtime.report("loss", remote_value, step)`. The RemoteValue is handed over before its
closure has run; the runtime resolves it on a background thread, so the loop only ever
waits at the end of an epoch (`coordinator.join()`), where it prints the epoch's mean loss.

    python examples/custom_loop_ps.py --epochs 5 --steps-per-epoch 40 --steps-per-call 4

Run it as the chief of a parameter_server job (see custom_loop_ps.yaml, or README.md for a
run by hand); the workers and parameter servers run `python -m agents.runtime.server`.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np
import tensorflow as tf
import tf_keras as keras
from sklearn.datasets import load_digits

from agents import runtime


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=40)
    parser.add_argument(
        "--steps-per-call", type=int, default=4, help="training steps per scheduled function"
    )
    parser.add_argument("--batch", type=int, default=int(os.environ.get("DIGITS_BATCH", "64")))
    parser.add_argument("--learning-rate", type=float, default=0.01)
    args = parser.parse_args()
    if args.steps_per_epoch % args.steps_per_call:
        parser.error("--steps-per-epoch must be a multiple of --steps-per-call")
    return args


def load_data() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    features = (digits.data / 16.0).astype("float32")  # pixel values are 0..16
    return features, digits.target.astype("int32")


def main() -> int:
    args = parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    features, labels = load_data()

    strategy = runtime.strategy()
    if not isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        print(
            f"strata-example: needs a parameter_server job, got {type(strategy).__name__} "
            "(set TF_CONFIG with chief, worker and ps tasks)",
            file=sys.stderr,
        )
        return 2
    config = runtime.cluster.tf_config()
    workers = len(config.cluster.get("worker", ())) if config is not None else 0
    print(
        f"strata-example: role={runtime.role()} strategy={type(strategy).__name__} "
        f"workers={workers}",
        flush=True,
    )
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    runtime.watch_coordinator(coordinator)  # queue depth, closures per worker, failures

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.layers.Input(shape=(64,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        optimizer = keras.optimizers.Adam(learning_rate=args.learning_rate)
        # Slots are variables too: create them here, on the parameter servers, not inside
        # the scheduled function.
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=keras.losses.Reduction.NONE
    )

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = input_context.get_per_replica_batch_size(args.batch)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        # Every worker reads everything, in its own (unseeded) order, forever.
        dataset = dataset.shuffle(len(features)).repeat()
        return dataset.batch(batch, drop_remainder=True).prefetch(2)

    @tf.function
    def per_worker_dataset_fn() -> tf.distribute.DistributedDataset:
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
    steps_per_call = args.steps_per_call

    @tf.function
    def train_steps(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
        """`steps_per_call` training steps on one worker; their mean loss."""

        def replica_fn(batch_features: tf.Tensor, batch_labels: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                logits = model(batch_features, training=True)
                loss = tf.nn.compute_average_loss(
                    loss_fn(batch_labels, logits), global_batch_size=args.batch
                )
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return loss

        total = tf.constant(0.0)
        for _ in tf.range(steps_per_call):
            batch_features, batch_labels = next(iterator)
            per_replica = strategy.run(replica_fn, args=(batch_features, batch_labels))
            total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return total / steps_per_call

    step = 0
    calls_per_epoch = args.steps_per_epoch // steps_per_call
    for epoch in range(args.epochs):
        started = time.monotonic()
        results = []
        for _ in range(calls_per_epoch):
            result = coordinator.schedule(train_steps, args=(iterator,))
            step += steps_per_call
            # Not fetched here: the runtime waits for the closure on its own thread.
            runtime.report("loss", result, step)
            results.append(result)
        coordinator.join()  # the epoch's closures have all run; fetching is now instant
        elapsed = time.monotonic() - started
        epoch_loss = float(np.mean([r.fetch() for r in results]))
        runtime.report("epoch_loss", epoch_loss, step)
        runtime.report("epoch", epoch + 1, step)
        runtime.report("steps_per_sec", args.steps_per_epoch / elapsed, step)
        runtime.report("examples_per_sec", args.steps_per_epoch * args.batch / elapsed, step)
        print(f"epoch={epoch + 1} loss={epoch_loss:.4f}", flush=True)

    print("strata-example: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
