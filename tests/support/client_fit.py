"""A client coordinator for the end-to-end tests: `python -m tests.support.client_fit
EPOCHS [JOB [PORT]]` connects to a job whose coordinator is the client (STRATA_SERVER,
STRATA_TOKEN; the job: JOB, else STRATA_JOB; serving at PORT, else a free one) and fits the
digits model with validation, one line per epoch. JOB `-`: once TensorFlow is imported it
prints "client ready" and reads the job's id from its stdin, so that a test can submit the
job only then, and the job's client_idle_timeout need not cover the import."""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any

import tf_keras as keras

from agents import runtime

# The example's model and data, untyped (examples/ is not type-checked).
digits: Any = importlib.import_module("examples.digits")


class EpochLines(keras.callbacks.Callback):  # type: ignore[misc]
    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        print(f"client epoch={epoch + 1} wall_time={time.time():.3f}", flush=True)


def main() -> None:
    epochs = int(sys.argv[1])
    named = sys.argv[2] if len(sys.argv) > 2 else os.environ["STRATA_JOB"]
    if named == "-":
        print("client ready", flush=True)
        named = sys.stdin.readline()
    job = int(named)
    port = int(sys.argv[3]) if len(sys.argv) > 3 else None
    strategy = runtime.connect(job, port=port)
    (features, labels), (held_out, held_out_labels) = digits.load_data()
    with strategy.scope():
        model = digits.build_model()
    model.fit(
        digits.make_dataset_creator(features, labels, 64),
        epochs=epochs,
        steps_per_epoch=20,
        validation_data=digits.make_dataset_creator(held_out, held_out_labels, 64, shuffle=False),
        validation_steps=5,
        callbacks=[EpochLines(), *runtime.callbacks(batch_size=64)],
        verbose=0,
    )
    runtime.flush()


if __name__ == "__main__":
    main()
