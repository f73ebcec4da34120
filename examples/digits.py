"""Train a small classifier on scikit-learn's digits (8x8 images, 10 classes) with tf_keras.

One script for every strategy: the job's strategy comes from `runtime.strategy()`, and the
input is a `DatasetCreator`, which model.fit accepts under ParameterServerStrategy,
MultiWorkerMirroredStrategy and MirroredStrategy alike. Everything else is ordinary tf_keras.
`runtime.callbacks()` streams the metrics and, under Strata, keeps checkpoints and backups.

The last EVAL_FRACTION of the data is held out: training never sees it. The job's sidecar
evaluator (the task whose role is "evaluator") evaluates each new checkpoint on it; with
`--validation-steps N`, `fit` validates on it at each epoch end (``val_*`` metrics), and with
`--evaluate-steps N` the script evaluates the trained model on it (``eval/*``). Under
parameter_server both run on the coordinator, which schedules the batches on the workers.

    python examples/digits.py --epochs 5 --steps-per-epoch 20 --batch 64
    python examples/digits.py --steps-per-execution 4 --validation-steps 5 --evaluate-steps 5
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras
from sklearn.datasets import load_digits

from agents import runtime

EVAL_FRACTION = 0.2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--batch", type=int, default=int(os.environ.get("DIGITS_BATCH", "64")))
    parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam's learning rate")
    parser.add_argument("--units", type=int, default=64, help="width of the hidden layer")
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=1,
        help="training steps per call of the compiled train function (compile's "
        "steps_per_execution); under parameter_server, steps per scheduled closure",
    )
    parser.add_argument(
        "--validation-steps",
        type=int,
        default=0,
        help="validate on the held-out data at each epoch end, this many batches "
        "(val_* metrics); 0: no validation",
    )
    parser.add_argument(
        "--evaluate-steps",
        type=int,
        default=0,
        help="after training, model.evaluate on the held-out data, this many batches "
        "(reported as eval/*); 0: no evaluation",
    )
    parser.add_argument(
        "--fail-at-epoch",
        type=int,
        default=None,
        help="exit with code 3 when this (1-based) epoch starts; lets tests crash a task",
    )
    parser.add_argument(
        "--without-runtime-callbacks",
        action="store_true",
        help="leave runtime.callbacks() out (no metrics, checkpoints or backups): lets the "
        "benchmarks tell the runtime library's cost from the rest of running under Strata",
    )
    return parser.parse_args()


def load_data() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(train, held-out eval) features and labels; the same split on every task."""
    digits = load_digits()
    features = (digits.data / 16.0).astype("float32")  # pixel values are 0..16
    labels = digits.target.astype("int32")
    split = int(len(features) * (1 - EVAL_FRACTION))
    return (features[:split], labels[:split]), (features[split:], labels[split:])


def make_dataset_creator(
    features: np.ndarray, labels: np.ndarray, global_batch: int, *, shuffle: bool = True
) -> keras.utils.experimental.DatasetCreator:
    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = input_context.get_per_replica_batch_size(global_batch)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        # Under multi_worker_mirrored each worker is one input pipeline and reads its own shard.
        # Under parameter_server every worker is pipeline 0 of 1 and reads everything, so the
        # shuffle is unseeded: each worker then draws its own order. The data repeat forever,
        # which is why model.fit needs steps_per_epoch (and validation_steps, and evaluate
        # steps: held-out data come as a DatasetCreator too, the only input that
        # ParameterServerStrategy takes besides in-memory arrays).
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if shuffle:
            dataset = dataset.shuffle(len(features))
        return dataset.repeat().batch(batch, drop_remainder=True).prefetch(2)

    return keras.utils.experimental.DatasetCreator(dataset_fn)


def build_model(
    steps_per_execution: int = 1, *, learning_rate: float = 0.01, units: int = 64
) -> keras.Model:
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(64,)),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model


class EpochLines(keras.callbacks.Callback):
    """One flushed line per epoch, so whoever streams stdout sees it as it happens. The wall
    time in it lets progress be timed from the log alone."""

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        logs = logs or {}
        validation = f" val_loss={float(logs['val_loss']):.4f}" if "val_loss" in logs else ""
        print(
            f"epoch={epoch + 1} loss={float(logs['loss']):.4f} "
            f"accuracy={float(logs['accuracy']):.4f}{validation} wall_time={time.time():.3f}",
            flush=True,
        )


class FirstStepLine(keras.callbacks.Callback):
    """One line when the first training step has run: when training really began."""

    def __init__(self) -> None:
        super().__init__()
        # It never reads the batch logs: no copying them to Python at every step for it.
        self._supports_tf_logs = True
        self._seen = False

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if not self._seen:
            self._seen = True
            print(f"strata-example: first step at wall_time={time.time():.3f}", flush=True)


class FailAtEpoch(keras.callbacks.Callback):
    """Crashes the entrypoint on purpose, for restart tests."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == self.epoch:
            print(f"strata-example: failing at epoch {self.epoch} as asked", flush=True)
            raise SystemExit(3)


def main() -> int:
    args = parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Line by line even into a pipe, so an agent streaming stdout sees epochs as they end.
        sys.stdout.reconfigure(line_buffering=True)
    (features, labels), (eval_features, eval_labels) = load_data()
    if runtime.role() == "evaluator":
        # Outside the training cluster: evaluate each checkpoint the chief writes, forever.
        print("strata-example: sidecar evaluator", flush=True)
        eval_data = tf.data.Dataset.from_tensor_slices((eval_features, eval_labels))
        runtime.sidecar_evaluator(build_model(units=args.units), eval_data.batch(args.batch))
        return 0

    strategy = runtime.strategy()
    print(
        f"strata-example: role={runtime.role()} strategy={type(strategy).__name__} "
        f"replicas={strategy.num_replicas_in_sync}",
        flush=True,
    )
    with strategy.scope():
        model = build_model(
            args.steps_per_execution, learning_rate=args.learning_rate, units=args.units
        )

    callbacks: list[keras.callbacks.Callback] = [FirstStepLine(), EpochLines()]
    if args.fail_at_epoch is not None:
        callbacks.append(FailAtEpoch(args.fail_at_epoch))
    if not args.without_runtime_callbacks:
        callbacks += runtime.callbacks(batch_size=args.batch)
    validation: dict[str, Any] = {}
    if args.validation_steps > 0:
        validation = {
            "validation_data": make_dataset_creator(
                eval_features, eval_labels, args.batch, shuffle=False
            ),
            "validation_steps": args.validation_steps,
        }
    model.fit(
        make_dataset_creator(features, labels, args.batch),
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=callbacks,
        verbose=0,
        **validation,
    )
    if args.evaluate_steps > 0:
        # On the coordinator under parameter_server (the workers run the steps); the same
        # callbacks report the result as eval/* at the last training step.
        results = model.evaluate(
            make_dataset_creator(eval_features, eval_labels, args.batch, shuffle=False),
            steps=args.evaluate_steps,
            callbacks=callbacks,
            verbose=0,
            return_dict=True,
        )
        print(
            "strata-example: evaluated "
            + " ".join(f"{name}={float(value):.4f}" for name, value in results.items()),
            flush=True,
        )
    print("strata-example: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
