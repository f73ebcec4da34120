"""A training script for the hang and false-positive tests: a small model trained on random
data read through a Python generator, with what makes training stall or look stalled.

    --block-file F --block-task worker:1   that task's input pipeline, once F exists, blocks
                                           in a read that never returns (a FIFO nobody writes)
    --trace-seconds N                      tracing the model's call takes N seconds
    --eval-seconds N                       each epoch ends with a validation of about N seconds
    --ballast-mb N                         an N MiB variable in every checkpoint and backup
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
import tf_keras as keras

from agents import runtime

FEATURES = 32
EVAL_BATCHES = 5


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--block-file", default=None)
    parser.add_argument("--block-task", default="worker:1")
    parser.add_argument("--trace-seconds", type=float, default=0.0)
    parser.add_argument("--eval-seconds", type=float, default=0.0)
    parser.add_argument("--ballast-mb", type=int, default=0)
    return parser.parse_args()


def read_record(block_file: str | None, blocking: bool) -> None:
    """Where a stuck filesystem would leave the reader: in read(2), for good."""
    if blocking and block_file is not None and os.path.exists(block_file):
        fifo = f"{block_file}.{os.getpid()}.fifo"
        os.mkfifo(fifo)
        print(f"health-script: reading {fifo}, which nobody writes", flush=True)
        descriptor = os.open(fifo, os.O_RDWR)  # we hold the writing end too: no EOF, ever
        os.read(descriptor, 1)


def batches(
    args: argparse.Namespace, sleep: float = 0.0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    blocking = os.environ.get("STRATA_TASK") == args.block_task
    while True:
        read_record(args.block_file, blocking)
        if sleep:
            time.sleep(sleep)
        features = rng.normal(size=(args.batch, FEATURES)).astype("float32")
        yield features, (features.sum(axis=1, keepdims=True) > 0).astype("float32")


def dataset(args: argparse.Namespace, sleep: float = 0.0) -> tf.data.Dataset:
    signature = (
        tf.TensorSpec((args.batch, FEATURES), tf.float32),
        tf.TensorSpec((args.batch, 1), tf.float32),
    )
    data = tf.data.Dataset.from_generator(lambda: batches(args, sleep), output_signature=signature)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return data.with_options(options)


class SlowToTrace(keras.Model):  # type: ignore[misc]
    """Sleeps while its call is traced: a model whose first step takes long to compile."""

    def __init__(self, trace_seconds: float, ballast_mb: int) -> None:
        super().__init__()
        self.trace_seconds = trace_seconds
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.out = keras.layers.Dense(1)
        # A large variable the model carries (checkpoints and backups write it every time).
        elements = ballast_mb * (1 << 20) // 4
        self.ballast = tf.Variable(tf.zeros([max(elements, 1)]), trainable=False)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        if self.trace_seconds:  # the first trace only: the train function's
            print(f"health-script: tracing for {self.trace_seconds:g}s", flush=True)
            time.sleep(self.trace_seconds)
            self.trace_seconds = 0.0
        return self.out(self.hidden(inputs))


def main() -> int:
    args = parse_args()
    strategy = runtime.strategy()
    with strategy.scope():
        model = SlowToTrace(args.trace_seconds, args.ballast_mb)
        model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))
    validation = {}
    if args.eval_seconds:
        validation = {
            "validation_data": dataset(args, sleep=args.eval_seconds / EVAL_BATCHES),
            "validation_steps": EVAL_BATCHES,
        }
    print(f"health-script: {os.environ.get('STRATA_TASK')} training", flush=True)
    model.fit(
        dataset(args),
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=runtime.callbacks(batch_size=args.batch),
        verbose=0,
        **validation,
    )
    print("health-script: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
