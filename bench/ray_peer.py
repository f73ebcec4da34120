"""The peer to compare with: the digits MWM job run through Ray Train's TensorflowTrainer.

    .venv/bin/python -m bench.ray_peer [--workers 2] [--epochs 6] [--steps-per-epoch 20] [--runs 1]

Each run starts a private, single-node Ray instance (`ray.init`), runs the job with
`ray.train.tensorflow.TensorflowTrainer` and shuts Ray down again, so no run inherits a warm
cluster from the one before. The job is examples/digits.py's: the same data, model, dataset
creator and global batch, fitted under the `MultiWorkerMirroredStrategy` that each Ray worker
builds from the TF_CONFIG Ray writes for it. Only plain tf_keras callbacks run, no Strata ones.

Two numbers come out of a run, both on the wall clock (`time.time()`, one machine):

* launch seconds: from just before `ray.init()` to the end of the first training batch on
  rank 0 (worker 0, which leads MWM since there is no chief), as rank 0's own callback saw it.
  The part spent in `ray.init()` alone is kept too, as ray_init_seconds. The driver imports
  Ray Train and TensorFlow before the clock starts; what Ray's own processes (the train
  controller, the workers) start and import on the way is counted;
* steps/s: rank 0's steps from the end of the first epoch to the end of the last, over that
  time, so start-up and the first epoch's graph tracing are left out.

Resources: every worker asks for one logical CPU (`resources_per_worker={"CPU": 1}`) and Ray
is given `workers + 1`. Ray Train's controller actor asks for none, so the spare one is only
headroom that keeps any other Ray task from queueing behind the workers; logical CPUs are a
scheduling count, and all processes share the machine's real cores either way.

Each worker's environment gets TF_USE_LEGACY_KERAS=1 (the project's Keras is tf_keras),
PYTHONPATH=the repository (so the workers import examples.digits in place rather than from a
copied working_dir) and OMP_NUM_THREADS=1: that is what Ray itself sets for a 1-CPU worker,
made explicit here. TF's own inter- and intra-op pools are left at their defaults, as Strata
leaves them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Ray puts unix sockets under its temp dir (.../session_<date>_<pid>/sockets/plasma_store), and
# a socket path may not exceed 107 bytes; a longer workdir falls back to a /tmp directory.
MAX_TEMP_DIR_CHARS = 40
WORKER_ENV = {
    "TF_USE_LEGACY_KERAS": "1",
    "PYTHONPATH": str(REPO),
    "OMP_NUM_THREADS": "1",
}


@dataclass
class RayRun:
    launch_seconds: float  # request -> first step on rank 0
    ray_init_seconds: float  # part of launch spent in ray.init()
    steps_per_second: float  # rank 0, epochs 2..E
    workers: int
    epochs: int
    steps_per_epoch: int


def ray_version() -> str:
    return metadata.version("ray")


def _train_loop(config: dict[str, Any]) -> None:
    """Ray Train's train_loop_per_worker: digits.py's fit under MWM, timed on rank 0."""
    # Runs in a Ray worker process, whose environment (TF_USE_LEGACY_KERAS, PYTHONPATH) comes
    # from the runtime_env; importing here keeps TensorFlow out of whoever imports this module.
    import ray.train
    import tensorflow as tf
    import tf_keras as keras

    # examples/ lies outside what the project type-checks (its tf_keras subclasses are untyped
    # to mypy); imported by name, mypy does not follow it into this module's check.
    digits: Any = importlib.import_module("examples.digits")

    rank = ray.train.get_context().get_world_rank()
    first_step: list[float] = []
    epoch_ends: list[float] = []

    class Clock(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if not first_step:
                first_step.append(time.time())

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            epoch_ends.append(time.time())

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = digits.build_model()
    (features, labels), _ = digits.load_data()
    model.fit(
        digits.make_dataset_creator(features, labels, config["batch"]),
        epochs=config["epochs"],
        steps_per_epoch=config["steps_per_epoch"],
        callbacks=[Clock()],
        verbose=0,
    )
    if rank == 0:
        Path(config["times_file"]).write_text(
            json.dumps({"first_step": first_step[0], "epoch_ends": epoch_ends})
        )


def ray_mwm_run(
    *, workers: int = 2, epochs: int, steps_per_epoch: int, batch: int = 64, workdir: Path
) -> RayRun:
    """One run of the digits MWM job on a fresh Ray instance, shut down before returning."""
    if epochs < 2:
        raise ValueError("epochs must be at least 2: the first one is left out of steps/s")
    # Ray Train's TensorFlow module imports TensorFlow at once, here in the driver too.
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    times_file = workdir / "ray_peer_times.json"
    times_file.unlink(missing_ok=True)
    temp_dir = workdir / "ray"
    own_temp = len(str(temp_dir)) > MAX_TEMP_DIR_CHARS
    if own_temp:
        temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    # Run as `python -m bench.ray_peer`, this module is __main__, and cloudpickle would ship
    # _train_loop by value; taken from the importable module it goes by reference instead.
    train_loop = importlib.import_module("bench.ray_peer")._train_loop
    trainer = TensorflowTrainer(
        train_loop,
        train_loop_config={
            "batch": batch,
            "epochs": epochs,
            "steps_per_epoch": steps_per_epoch,
            "times_file": str(times_file),
        },
        scaling_config=ScalingConfig(
            num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 1}
        ),
        run_config=RunConfig(name="digits-mwm", storage_path=str(workdir / "storage")),
    )
    start = time.time()
    try:
        ray.init(
            num_cpus=workers + 1,
            num_gpus=0,
            include_dashboard=False,
            logging_level=logging.WARNING,
            _temp_dir=str(temp_dir),
            runtime_env={"env_vars": WORKER_ENV},
        )
        ray_init_seconds = time.time() - start
        trainer.fit()
    finally:
        ray.shutdown()
        if own_temp:
            shutil.rmtree(temp_dir, ignore_errors=True)
    times = json.loads(times_file.read_text())
    epoch_ends: list[float] = times["epoch_ends"]
    return RayRun(
        launch_seconds=times["first_step"] - start,
        ray_init_seconds=ray_init_seconds,
        steps_per_second=(epochs - 1) * steps_per_epoch / (epoch_ends[-1] - epoch_ends[0]),
        workers=workers,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ray-peer-") as workdir:
        for _ in range(args.runs):
            run = ray_mwm_run(
                workers=args.workers,
                epochs=args.epochs,
                steps_per_epoch=args.steps_per_epoch,
                batch=args.batch,
                workdir=Path(workdir),
            )
            print(json.dumps(asdict(run)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
