"""Keras 3 models (`import keras`) with the runtime: the callbacks serve them under the default
strategy (what mirrored runs, with one device here), the sidecar evaluator reads their
checkpoints, and a Keras 3 model under a strategy Keras 3 cannot train with stops its task
for good at the start of fit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agents.runtime.callbacks import make_callbacks
from agents.runtime.evaluator import run_sidecar_evaluator
from agents.runtime.flavor import (
    KerasFlavor,
    keras3_refusal,
    keras3_script_refusal,
    keras_flavor,
)
from agents.runtime.refusal import EXIT_REFUSED
from tests.agents.runtime.test_runtime_checkpoints import (
    BATCH,
    Crash,
    FakeSink,
    Hooks,
    data,
)
from tests.agents.runtime.test_runtime_checkpoints import (
    build_model as build_tf_keras_model,
)

pytestmark = pytest.mark.slow  # TensorFlow in the test process


def build_model() -> Any:
    import keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=(8,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def fit(model: Any, callbacks: list[Any], epochs: int) -> None:
    features, labels = data(64)
    model.fit(features, labels, batch_size=BATCH, epochs=epochs, callbacks=callbacks, verbose=0)


def test_the_flavor_comes_from_the_model() -> None:
    assert keras_flavor(build_model()) is KerasFlavor.keras3
    assert keras_flavor(build_tf_keras_model()) is KerasFlavor.tf_keras


def test_keras3_is_refused_only_where_it_cannot_train() -> None:
    import keras

    class MultiWorkerMirroredStrategy:  # matched by class name, as TF's own
        pass

    class ParameterServerStrategy:
        pass

    def on(strategy: object) -> Any:
        class Placed(keras.Sequential):  # type: ignore[misc]
            @property
            def distribute_strategy(self) -> object:
                return strategy

        return Placed([keras.layers.Input(shape=(2,)), keras.layers.Dense(1)])

    mwm = keras3_refusal(on(MultiWorkerMirroredStrategy()))
    assert mwm is not None
    assert "Keras 3" in mwm and "multi_worker_mirrored" in mwm and "tf_keras" in mwm
    ps = keras3_refusal(on(ParameterServerStrategy()))
    assert ps is not None and "parameter_server" in ps and "import tf_keras as keras" in ps
    assert keras3_refusal(build_model()) is None  # the default strategy: fine
    assert keras3_refusal(build_tf_keras_model()) is None


def test_a_script_that_imported_keras3_is_refused_before_fit_where_it_cannot_train() -> None:
    import keras  # noqa: F401  (this process has Keras 3 loaded, as a Keras 3 script would)

    for strategy in ("parameter_server", "multi_worker_mirrored"):
        reason = keras3_script_refusal(strategy)
        assert reason is not None and strategy in reason and "tf_keras" in reason
    assert keras3_script_refusal("mirrored") is None


def test_keras3_trains_with_the_callbacks_and_resumes_from_its_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv(
        "STRATA_CHECKPOINT_POLICY", '{"every_epochs": 1, "keep": 10, "backup_every_seconds": 0}'
    )
    first = FakeSink()
    crashing = Hooks(crash_at=2)
    with pytest.raises(Crash):
        fit(build_model(), [*make_callbacks(sink=first), crashing], epochs=4)
    assert [s.name for s in first.saved] == ["ckpt-1", "ckpt-2"]
    assert [step for step, _ in first.series("loss")] == [4, 8]
    assert (tmp_path / "backup" / "latest.weights.h5").exists()  # Keras 3's own backup

    second = FakeSink()  # the restarted task
    model = build_model()
    resumed = Hooks()
    fit(model, [*make_callbacks(sink=second), resumed], epochs=4)
    assert resumed.epochs == [2, 3]
    assert int(model.optimizer.iterations.numpy()) == 16  # the step was restored too
    assert [(s.name, s.step, s.epoch) for s in second.saved] == [
        ("ckpt-3", 12, 3),
        ("ckpt-4", 16, 4),
    ]
    assert second.series("epoch") == [(12, 3.0), (16, 4.0)]
    assert not (tmp_path / "backup").exists()  # a finished fit drops its backup

    # The sidecar evaluator restores the Keras 3 model from those TF checkpoints.
    import tensorflow as tf

    features, labels = data(32)
    evaluated = FakeSink()
    run_sidecar_evaluator(
        build_model(),
        tf.data.Dataset.from_tensor_slices((features, labels)).batch(BATCH),
        directory=str(tmp_path),
        sink=evaluated,
        max_evaluations=4,
    )
    [(step, loss)] = evaluated.series("eval/loss")
    assert step == 16 and loss > 0


REFUSED_UNDER_MWM = textwrap.dedent(
    """
    import keras, numpy as np, tensorflow as tf
    from agents import runtime
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # one worker, no TF_CONFIG
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss="mse")
    x = np.zeros((8, 4), "float32")
    model.fit(x, np.zeros((8, 2), "float32"), epochs=1, callbacks=runtime.callbacks(), verbose=0)
    print("trained, which it must not have")
    """
)


def test_keras3_under_multi_worker_mirrored_stops_at_once(tmp_path: Path) -> None:
    termination = tmp_path / "termination.json"
    env = {
        **os.environ,
        "STRATA_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "STRATA_TERMINATION_FILE": str(termination),
    }
    env.pop("TF_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", REFUSED_UNDER_MWM],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == EXIT_REFUSED, done.stderr[-3000:]
    assert "trained" not in done.stdout
    reason = json.loads(termination.read_text())["reason"]
    assert "Keras 3" in reason and "multi_worker_mirrored" in reason and "tf_keras" in reason
    assert f"strata: {reason}" in done.stderr
