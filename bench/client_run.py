"""The client of bench/client_mode.py: `python -m bench.client_run JOB EPOCHS STEPS BATCH`
imports what a notebook would have imported already (TensorFlow, the runtime, the example),
says when it calls `runtime.connect`, then fits the digits model as examples/digits.py does
in a chief (the same model, input, batch and epoch lines)."""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any

from agents import runtime

digits: Any = importlib.import_module("examples.digits")


def main() -> None:
    job, epochs, steps, batch = (int(arg) for arg in sys.argv[1:5])
    (features, labels), _ = digits.load_data()
    print(f"bench-client: connect at wall_time={time.time():.3f}", flush=True)
    strategy = runtime.connect(job)
    with strategy.scope():
        model = digits.build_model()
    model.fit(
        digits.make_dataset_creator(features, labels, batch),
        epochs=epochs,
        steps_per_epoch=steps,
        callbacks=[digits.FirstStepLine(), digits.EpochLines(), *runtime.callbacks(batch)],
        verbose=0,
    )
    runtime.flush()


if __name__ == "__main__":
    main()
