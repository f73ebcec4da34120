"""Train the digits classifier with Keras 3 (`import keras`), as TensorFlow's tutorials do now.

Keras 3 trains under the `mirrored` strategy (one process, all its local devices) and alone;
it cannot train under `multi_worker_mirrored` or `parameter_server` (see examples/README.md),
where the runtime stops the job at the start of `fit` with a message that says so. The Strata
lines are the same as in digits.py: `runtime.strategy()` and `callbacks=runtime.callbacks()`,
which gives the Keras 3 model Keras 3's own BackupAndRestore, metrics and checkpoints. Keras 3
takes no DatasetCreator: the input is a plain `tf.data.Dataset`.

    python examples/keras3_mirrored.py --epochs 5 --steps-per-epoch 20 --batch 64
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

from agents import runtime

EVAL_FRACTION = 0.2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    parser.add_argument(
        "--epoch-seconds",
        type=float,
        default=0.0,
        help="sleep this long at each epoch end: lets tests catch the task mid-training",
    )
    return parser.parse_args()


def load_data() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(train, held-out eval) features and labels; the same split on every task."""
    digits = load_digits()
    features = (digits.data / 16.0).astype("float32")
    labels = digits.target.astype("int32")
    split = int(len(features) * (1 - EVAL_FRACTION))
    return (features[:split], labels[:split]), (features[split:], labels[split:])


def build_model(steps_per_execution: int = 1) -> keras.Model:
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(64,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model


class EpochLines(keras.callbacks.Callback):  # type: ignore[misc]
    """One flushed line per epoch (and an optional pause, for tests)."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause = pause

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        logs = logs or {}
        print(
            f"epoch={epoch + 1} loss={float(logs['loss']):.4f} "
            f"accuracy={float(logs['accuracy']):.4f} wall_time={time.time():.3f}",
            flush=True,
        )
        time.sleep(self.pause)


def main() -> int:
    args = parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    (features, labels), (eval_features, eval_labels) = load_data()
    eval_data = tf.data.Dataset.from_tensor_slices((eval_features, eval_labels)).batch(args.batch)
    if runtime.role() == "evaluator":
        print("strata-example: sidecar evaluator", flush=True)
        runtime.sidecar_evaluator(build_model(), eval_data)
        return 0

    strategy = runtime.strategy()
    print(f"strata-example: keras {keras.__version__} under {type(strategy).__name__}", flush=True)
    with strategy.scope():
        model = build_model(args.steps_per_execution)
    train = (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .shuffle(len(features))
        .repeat()
        .batch(args.batch, drop_remainder=True)
    )
    model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        validation_data=eval_data,
        callbacks=[EpochLines(args.epoch_seconds), *runtime.callbacks(batch_size=args.batch)],
        verbose=0,
    )
    print("strata-example: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
