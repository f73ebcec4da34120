"""The peer for bench.sweeps: the same search run through Ray Tune, as its docs run Keras.

    .venv/bin/python -m bench.ray_tune_peer --seed 7 --out result.json

One run starts a private, single-node Ray instance (`ray.init(num_cpus=parallel)`, as
bench.ray_peer does: worker env TF_USE_LEGACY_KERAS=1, PYTHONPATH=the repository,
OMP_NUM_THREADS=1; and RAY_worker_niceness=0, the niceness Strata's tasks run at, where Ray's
default is 15), waits for the machine to be quiet, then runs one `tune.Tuner` over a
function trainable and shuts Ray down. Everything the search is made of comes from
examples/digits_sweep.yaml, the spec Strata runs (`settings_from_spec`):

* the trainable is the trial job's: examples/digits.py's data, model
  (`build_model(learning_rate=, units=)`), dataset creator and batch, fitted under a
  `MirroredStrategy` (the trial job's strategy, one chief) for the same epochs, steps per
  epoch and validation steps; a tf_keras callback reports val_loss at each epoch end with
  `ray.tune.report` (what Ray's own `TuneReportCheckpointCallback` does, without the
  checkpoint);
* the same space (`tune.loguniform`, `tune.lograndint`, upper bound exclusive), searched by
  `OptunaSearch` with Optuna's `TPESampler(seed=...)`, the sampler Strata's sweep uses;
* `ASHAScheduler(time_attr="training_iteration", max_t=epochs, grace_period=min_resource,
  reduction_factor=...)`, `num_samples` = the trial budget, `max_concurrent_trials` = its
  parallelism, one CPU per trial. Actors are not reused (Tune's default): each trial starts a
  new worker process, which imports TensorFlow.

The clock starts at `Tuner.fit()` (Ray already up, as Strata's server and agents are) and
stops when it returns. A `tune.Callback` on the driver records when each trial started, each
result as the driver got it, and when the trial completed; a subclass of the scheduler, when
each trial was added (a callback is not told) and when ASHA decided to stop it. The trainable
puts its own wall times (entered, TensorFlow imported, first training step, each report) in
every result. All clocks are `time.time()` on one machine.
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

import yaml

from bench.harness import Conditions
from bench.ray_peer import MAX_TEMP_DIR_CHARS, WORKER_ENV

REPO = Path(__file__).resolve().parent.parent
SWEEP_SPEC = REPO / "examples" / "digits_sweep.yaml"


@dataclass(frozen=True)
class SweepSettings:
    """What both sides run, read from the sweep spec."""

    trials: int
    parallel: int
    epochs: int
    steps_per_epoch: int
    validation_steps: int
    batch: int
    lr_low: float
    lr_high: float
    units_low: int
    units_high: int
    min_resource: int
    reduction_factor: int
    metric: str
    chief_gpus: int = 0  # what the trial job's chief asks for (Strata's placement only)


def _flag(argv: list[str], name: str) -> int:
    return int(argv[argv.index(name) + 1])


def settings_from_spec(spec: dict[str, Any]) -> SweepSettings:
    """The budget, space, job size and ASHA settings of a digits sweep spec."""
    job, params, stopping = spec["job"], spec["parameters"], spec["early_stopping"]
    argv = [str(a) for a in job["entrypoint"]]
    if stopping["type"] != "asha" or stopping.get("resource", "epochs") != "epochs":
        raise ValueError("the peer runs ASHA on epochs only")
    return SweepSettings(
        trials=int(spec["budget"]["trials"]),
        parallel=int(spec["budget"]["parallel"]),
        epochs=_flag(argv, "--epochs"),
        steps_per_epoch=_flag(argv, "--steps-per-epoch"),
        validation_steps=_flag(argv, "--validation-steps"),
        batch=int(job.get("env", {}).get("DIGITS_BATCH", 64)),
        lr_low=float(params["lr"]["low"]),
        lr_high=float(params["lr"]["high"]),
        units_low=int(params["units"]["low"]),
        units_high=int(params["units"]["high"]),
        min_resource=int(stopping["min_resource"]),
        reduction_factor=int(stopping["reduction_factor"]),
        metric=str(spec["objective"]["metric"]),
        chief_gpus=int(job["replicas"]["chief"].get("gpus", 0)),
    )


def load_sweep_spec(path: Path = SWEEP_SPEC) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(path.read_text())
    return spec


def ray_version() -> str:
    return metadata.version("ray")


def _trainable(config: dict[str, Any]) -> None:
    """One trial: digits.py's job under a one-replica MirroredStrategy, val_loss per epoch."""
    entered = time.time()
    # Runs in a Ray worker process (env from the runtime_env); imported here so that whoever
    # imports this module does not import TensorFlow.
    import tensorflow as tf
    import tf_keras as keras
    from ray import tune

    digits: Any = importlib.import_module("examples.digits")
    imported = time.time()
    first_step: list[float] = []

    class FirstStep(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if not first_step:
                first_step.append(time.time())

    class Report(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            logs = logs or {}
            tune.report(
                {
                    "val_loss": float(logs["val_loss"]),
                    "epoch": epoch + 1,
                    "reported_at": time.time(),
                    "first_step": first_step[0],
                    "entered": entered,
                    "imported": imported,
                }
            )

    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = digits.build_model(learning_rate=config["lr"], units=config["units"])
    (features, labels), (eval_features, eval_labels) = digits.load_data()
    batch = config["batch"]
    model.fit(
        digits.make_dataset_creator(features, labels, batch),
        epochs=config["epochs"],
        steps_per_epoch=config["steps_per_epoch"],
        validation_data=digits.make_dataset_creator(
            eval_features, eval_labels, batch, shuffle=False
        ),
        validation_steps=config["validation_steps"],
        callbacks=[FirstStep(), Report()],
        verbose=0,
    )


def _timeline_callback() -> Any:
    """A tune.Callback that records when each trial was added, started, reported, ended."""
    from ray import tune

    class Timeline(tune.Callback):
        def __init__(self) -> None:
            self.trials: dict[str, dict[str, Any]] = {}

        def _of(self, trial: Any) -> dict[str, Any]:
            return self.trials.setdefault(
                trial.trial_id, {"config": dict(trial.config), "results": []}
            )

        def on_trial_start(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            self._of(trial)["started"] = time.time()

        def on_trial_result(
            self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            kept = {k: result[k] for k in ("epoch", "val_loss", "reported_at", "first_step")}
            kept |= {k: result[k] for k in ("entered", "imported")}
            self._of(trial)["results"].append({**kept, "received": time.time()})

        def on_trial_complete(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            self._of(trial)["ended"] = time.time()

        def on_trial_error(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            self._of(trial).update(ended=time.time(), error=True)

    return Timeline()


def _timed_asha(timeline: Any, **settings: Any) -> Any:
    """Tune's ASHAScheduler, noting in the timeline when each trial was added (a tune.Callback
    is not told) and when the scheduler decided to stop it."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class TimedASHA(ASHAScheduler):
        def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
            timeline._of(trial)["added"] = time.time()
            super().on_trial_add(tune_controller, trial)

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
            decision = super().on_trial_result(tune_controller, trial, result)
            if decision == TrialScheduler.STOP:
                timeline._of(trial)["stop_decided"] = time.time()
            return decision

    return TimedASHA(**settings)


@dataclass
class TuneRun:
    began: float  # Tuner.fit() called
    ended: float  # it returned
    ray_init_seconds: float
    background_cores_before: float
    seed: int
    trials: list[dict[str, Any]]  # the Timeline's records, in the order trials were added


def tune_run(settings: SweepSettings, *, seed: int, workdir: Path) -> TuneRun:
    """One search on a fresh Ray instance, shut down before returning."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import ray
    from optuna.samplers import TPESampler
    from ray import tune
    from ray._private.ray_constants import RAY_WORKER_NICENESS  # "RAY_worker_niceness"
    from ray.tune.search.optuna import OptunaSearch

    # Ray runs its workers at niceness 15 by default; Strata's tasks run at 0. On a machine
    # shared with other work that alone would hand Ray's trials less CPU: at 0 here too (read
    # by the raylet that ray.init starts).
    os.environ[RAY_WORKER_NICENESS] = "0"
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    temp_dir = workdir / "ray"
    own_temp = len(str(temp_dir)) > MAX_TEMP_DIR_CHARS
    if own_temp:
        temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    # As `python -m bench.ray_tune_peer` this module is __main__; taken from the importable
    # module, the trainable goes to the workers by reference, not by value.
    trainable = importlib.import_module("bench.ray_tune_peer")._trainable
    timeline = _timeline_callback()
    start = time.time()
    try:
        ray.init(
            num_cpus=settings.parallel,
            num_gpus=0,
            include_dashboard=False,
            logging_level=logging.WARNING,
            _temp_dir=str(temp_dir),
            runtime_env={"env_vars": WORKER_ENV},
        )
        ray_init_seconds = time.time() - start
        background = Conditions(max_wait=20.0).wait_quiet()
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space={
                "lr": tune.loguniform(settings.lr_low, settings.lr_high),
                "units": tune.lograndint(settings.units_low, settings.units_high + 1),
                "epochs": settings.epochs,
                "steps_per_epoch": settings.steps_per_epoch,
                "validation_steps": settings.validation_steps,
                "batch": settings.batch,
            },
            tune_config=tune.TuneConfig(
                metric=settings.metric,
                mode="min",
                search_alg=OptunaSearch(sampler=TPESampler(seed=seed)),
                scheduler=_timed_asha(
                    timeline,
                    time_attr="training_iteration",
                    max_t=settings.epochs,
                    grace_period=settings.min_resource,
                    reduction_factor=settings.reduction_factor,
                ),
                num_samples=settings.trials,
                max_concurrent_trials=settings.parallel,
            ),
            run_config=tune.RunConfig(
                name="digits-asha",
                storage_path=str(workdir / "storage"),
                callbacks=[timeline],
                verbose=0,
            ),
        )
        began = time.time()
        tuner.fit()
        ended = time.time()
    finally:
        ray.shutdown()
        if own_temp:
            shutil.rmtree(temp_dir, ignore_errors=True)
    trials = sorted(timeline.trials.values(), key=lambda t: t.get("added", 0.0))
    return TuneRun(
        began=began,
        ended=ended,
        ray_init_seconds=ray_init_seconds,
        background_cores_before=background,
        seed=seed,
        trials=trials,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--spec", type=Path, default=SWEEP_SPEC)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    settings = settings_from_spec(load_sweep_spec(args.spec))
    with tempfile.TemporaryDirectory(prefix="ray-tune-peer-") as workdir:
        run = tune_run(settings, seed=args.seed, workdir=Path(workdir))
    args.out.write_text(json.dumps({"ray": ray_version(), **asdict(run)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
