"""The export of the trained model and the warm start from a checkpoint path, in-process with
tf_keras (the strategies themselves are covered end to end in tests/e2e)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.runtime import export as exporting
from agents.runtime import warm_start as warming
from agents.runtime.callbacks import make_callbacks
from agents.runtime.refusal import EXIT_REFUSED, TaskRefused
from tests.agents.runtime.test_runtime_checkpoints import FakeSink, build_model, data, fit, saver

pytestmark = pytest.mark.slow  # TensorFlow in the test process


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A task under Strata with a checkpoint dir, no export, no warm start, and a
    termination file for refusals."""
    directory = tmp_path / "job-1"
    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(directory))
    monkeypatch.setenv("STRATA_TERMINATION_FILE", str(tmp_path / "termination.json"))
    for name in ("STRATA_EXPORT", "STRATA_WARM_START_FROM", "TF_CONFIG", "STRATA_TASK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(warming, "_done", threading.Event())
    return directory


def refusal(tmp_path: Path) -> str:
    reason: str = json.loads((tmp_path / "termination.json").read_text())["reason"]
    return reason


# --- export -------------------------------------------------------------------------------


def test_no_export_unless_the_spec_asks(job_dir: Path) -> None:
    assert exporting.export_callback(FakeSink()) is None
    names = [type(c).__name__ for c in make_callbacks(sink=FakeSink())]
    assert "StrataExport" not in names and "StrataWarmStart" not in names


def test_a_saved_model_is_written_reported_and_loads(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tf_keras

    monkeypatch.setenv("STRATA_EXPORT", '{"dir": "export", "format": "auto"}')
    sink = FakeSink()
    callbacks = make_callbacks(sink=sink)
    names = [type(c).__name__ for c in callbacks]
    assert names[-2:] == ["StrataCheckpoints", "StrataExport"], names
    model = build_model()
    fit(model, callbacks, epochs=2)

    exported = job_dir / "export"
    assert (exported / "saved_model.pb").is_file()
    assert not [p for p in job_dir.iterdir() if p.name.startswith(".export")]  # no leftovers
    report = sink.saved[-1]
    assert (report.name, report.trigger, report.format, report.keras) == (
        "export",
        "export",
        "saved_model",
        "tf_keras",
    )
    assert report.epoch == 2 and report.step == 8 and report.size_bytes > 0
    assert "loss" in report.metrics
    # The regular checkpoints say their Keras too.
    assert [s.keras for s in sink.saved if s.trigger != "export"] == ["tf_keras"] * 2

    loaded = tf_keras.models.load_model(str(exported))
    features, _ = data(4)
    np.testing.assert_allclose(loaded.predict(features, verbose=0), model.predict(features))


def test_the_keras_format_and_a_second_export_over_the_first(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tf_keras

    monkeypatch.setenv("STRATA_EXPORT", '{"dir": "model", "format": "keras"}')
    sink = FakeSink()
    model = build_model()
    fit(model, [exporting.export_callback(sink)], epochs=1)
    fit(model, [exporting.export_callback(sink)], epochs=1)
    assert [(s.name, s.format, s.step) for s in sink.saved] == [
        ("model.keras", "keras", 4),
        ("model.keras", "keras", 8),
    ]
    assert sorted(p.name for p in job_dir.iterdir()) == ["model.keras"]
    loaded = tf_keras.models.load_model(str(job_dir / "model.keras"))
    features, _ = data(4)
    np.testing.assert_allclose(loaded.predict(features, verbose=0), model.predict(features))


def test_an_export_that_fails_stops_the_task_for_good(
    job_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setenv("STRATA_EXPORT", "{}")
    monkeypatch.setattr(exporting, "write_model", broken)
    with pytest.raises(TaskRefused) as refused:
        fit(build_model(), [exporting.export_callback(FakeSink())], epochs=1)
    assert refused.value.code == EXIT_REFUSED
    assert "could not be exported" in refusal(tmp_path) and "disk full" in refusal(tmp_path)


# --- warm start ----------------------------------------------------------------------------


def trained_checkpoints(tmp_path: Path) -> tuple[Any, Path]:
    """A model trained for 3 epochs and its checkpoint dir (StrataCheckpoints wrote it)."""
    source = tmp_path / "job-0"
    model = build_model()
    fit(model, [saver(source, FakeSink(), keep=2)], epochs=3)
    return model, source


def kernels(model: Any) -> list[Any]:
    return [w.numpy() for w in model.weights]


def test_a_warm_start_restores_the_latest_checkpoint_of_a_dir(
    job_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    trained, source = trained_checkpoints(tmp_path)
    monkeypatch.setenv("STRATA_WARM_START_FROM", str(source))
    model = build_model()
    callbacks = make_callbacks(sink=FakeSink())
    names = [type(c).__name__ for c in callbacks]
    assert names.index("StrataWarmStart") < names.index("StrataBackup"), names
    warm = callbacks[names.index("StrataWarmStart")]
    warm.set_model(model)
    warm.on_train_begin()
    for got, want in zip(kernels(model), kernels(trained), strict=True):
        np.testing.assert_array_equal(got, want)
    assert int(model.optimizer.iterations) == 12  # the optimizer's state came too
    assert f"warm-started the model from {source / 'ckpt-3'}" in capsys.readouterr().out
    # Once per process: a second fit goes on from its own weights.
    assert warming.warm_start(model) is None


def test_a_task_with_a_backup_resumes_from_it_instead(
    job_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    _, source = trained_checkpoints(tmp_path)
    (job_dir / "backup" / "chief").mkdir(parents=True)
    (job_dir / "backup" / "chief" / "checkpoint").write_text("x")
    monkeypatch.setenv("STRATA_WARM_START_FROM", str(source / "ckpt-2"))
    model = build_model()
    before = kernels(model)
    assert warming.warm_start(model) is None
    for got, want in zip(kernels(model), before, strict=True):
        np.testing.assert_array_equal(got, want)
    assert "resuming from this task's own backup" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("missing", "is not a checkpoint"),
        ("empty-dir", "holds no checkpoint"),
        ("other-model", "incompatible tensor"),
    ],
)
def test_a_warm_start_that_cannot_be_done_stops_the_task_for_good(
    job_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, words: str
) -> None:
    import tf_keras as keras

    path = tmp_path / where
    model = build_model()
    if where == "empty-dir":
        path.mkdir()
    elif where == "other-model":
        _, source = trained_checkpoints(tmp_path)
        path = source / "ckpt-3"
        model = keras.Sequential([keras.layers.Input(shape=(8,)), keras.layers.Dense(3)])
        model.compile(optimizer="adam", loss="mse")
    monkeypatch.setenv("STRATA_WARM_START_FROM", str(path))
    with pytest.raises(TaskRefused):
        warming.warm_start(model)
    reason = refusal(tmp_path)
    assert reason.startswith(f"cannot warm-start from checkpoint.warm_start_from={path}: ")
    assert words in reason, reason


# --- Keras 3 -------------------------------------------------------------------------------


def build_keras3_model() -> Any:
    from tests.agents.runtime.test_runtime_keras3 import build_model as build_keras3

    return build_keras3()


def fit_keras3(model: Any, callbacks: list[Any], epochs: int) -> None:
    from tests.agents.runtime.test_runtime_keras3 import fit as fit_keras3_model

    fit_keras3_model(model, callbacks, epochs)


@pytest.mark.parametrize(
    ("fmt", "name", "written"),
    [("auto", "export.keras", "keras"), ("saved_model", "export", "saved_model")],
)
def test_a_keras3_model_is_exported_in_its_own_format(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, name: str, written: str
) -> None:
    import keras
    import tensorflow as tf

    monkeypatch.setenv("STRATA_EXPORT", json.dumps({"format": fmt}))
    sink = FakeSink()
    model = build_keras3_model()
    fit_keras3(model, make_callbacks(sink=sink), epochs=1)
    report = sink.saved[-1]
    assert (report.name, report.format, report.keras) == (name, written, "keras3")
    features, _ = data(4)
    expected = np.asarray(model.predict(features, verbose=0))
    path = str(job_dir / name)
    if written == "keras":
        got = keras.models.load_model(path).predict(features, verbose=0)
    else:
        loaded = tf.saved_model.load(path)  # held: its variables live as long as it does
        got = loaded.serve(tf.constant(features)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_keras3_model_warm_starts_from_a_keras3_checkpoint(
    job_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "job-0"
    trained = build_keras3_model()
    fit_keras3(trained, [saver(source, FakeSink())], epochs=2)
    monkeypatch.setenv("STRATA_WARM_START_FROM", str(source))
    model = build_keras3_model()
    assert warming.warm_start(model) == str(source / "ckpt-2")
    for got, want in zip(kernels(model), kernels(trained), strict=True):
        np.testing.assert_array_equal(got, want)
