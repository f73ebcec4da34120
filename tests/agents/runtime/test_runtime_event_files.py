"""TensorBoard event files from the runtime: what is streamed is written, and read back.

Real `model.fit` runs (tf_keras and Keras 3) on the CPU write through `EventFileSink`; the
files are read back with TensorBoard's own `EventAccumulator`. Parameter-server batch curves
are checked end to end in tests/e2e/test_tensorboard.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agents.runtime import process_sink
from agents.runtime import sender as sender_module
from agents.runtime.callbacks import make_callbacks
from agents.runtime.event_files import (
    DIR_ENV,
    EventFileSink,
    event_file_dir,
    with_event_files,
)
from agents.runtime.sink import NullSender
from tests.agents.runtime.test_runtime_callbacks import Recorder, build_model, digits_like

pytestmark = pytest.mark.slow  # TensorBoard's reader and writer import TensorFlow


def scalars(logdir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar series in `logdir`'s event files: tag -> [(step, value, wall_time)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(e.step, e.value, e.wall_time) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_the_task_dir_comes_from_the_checkpoint_dir_or_is_set() -> None:
    env = {"STRATA_CHECKPOINT_DIR": "/ckpt/job-3", "STRATA_TASK": "chief:0"}
    assert event_file_dir(env) == Path("/ckpt/job-3/tensorboard/chief-0")
    assert event_file_dir({**env, "STRATA_TASK": "evaluator:0"}) == Path(
        "/ckpt/job-3/tensorboard/evaluator-0"
    )
    assert event_file_dir({**env, DIR_ENV: "/elsewhere"}) == Path("/elsewhere")
    assert event_file_dir({"STRATA_TASK": "chief:0"}) is None  # no checkpoint dir
    assert event_file_dir({"STRATA_CHECKPOINT_DIR": "/ckpt"}) is None  # no task
    assert event_file_dir({**env, "STRATA_TASK": "nobody"}) is None  # not a task name


def test_only_a_reporting_task_with_a_dir_writes(tmp_path: Path) -> None:
    env = {"STRATA_CHECKPOINT_DIR": str(tmp_path), "STRATA_TASK": "worker:1"}
    null = NullSender()
    assert with_event_files(null, env) is null
    recorder = Recorder()
    assert with_event_files(recorder, {"STRATA_TASK": "worker:1"}) is recorder
    wrapped = with_event_files(recorder, env)
    assert isinstance(wrapped, EventFileSink)
    assert wrapped.logdir == tmp_path / "tensorboard" / "worker-1"
    wrapped.close(timeout=1)


def test_points_are_passed_on_and_written_with_their_step_and_wall_time(tmp_path: Path) -> None:
    # The writer thread's first drain imports TensorBoard's writer and TensorFlow, which can
    # take longer than the wait below on a loaded machine: import them (and the reader) first.
    from tensorboard.compat.proto import event_pb2  # noqa: F401
    from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: F401

    assert scalars(tmp_path) == {}
    recorder = Recorder()
    sink = EventFileSink(recorder, tmp_path, interval=0.05)
    sink.put("loss", 2.5, 10, 1_700_000_000.5)
    sink.put("loss", 1.5, 20, 1_700_000_001.5)
    sink.put("eval/accuracy", 0.75, 20)
    assert recorder.series("loss") == [(10, 2.5), (20, 1.5)]  # the server still gets them
    # The writer thread's own drain, without a flush: the file can exist (its header written)
    # before the points are in it, so wait for what is read, not for the file.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if list(tmp_path.glob("events.out.tfevents.*")):
            read = scalars(tmp_path)
            if len(read.get("loss", [])) == 2 and "eval/accuracy" in read:
                break
        time.sleep(0.05)
    read = scalars(tmp_path)
    assert [(step, value) for step, value, _ in read["loss"]] == [(10, 2.5), (20, 1.5)]
    assert [wall for *_, wall in read["loss"]] == pytest.approx([1_700_000_000.5, 1_700_000_001.5])
    assert [(s, v) for s, v, _ in read["eval/accuracy"]] == [(20, 0.75)]
    sink.put("loss", 0.5, 30)
    assert sink.flush(timeout=1)  # a flush writes what is queued
    assert [s for s, *_ in scalars(tmp_path)["loss"]] == [10, 20, 30]
    sink.close(timeout=1)
    sink.put("loss", 0.25, 40)  # after close: passed on, never written
    assert sink.write_pending() == 0
    assert recorder.series("loss")[-1] == (40, 0.25)


def test_a_full_buffer_drops_the_oldest_points(tmp_path: Path) -> None:
    sink = EventFileSink(Recorder(), tmp_path, interval=3600, capacity=3)
    for step in range(1, 6):
        sink.put("loss", float(step), step)
    assert sink.dropped == 2
    assert sink.write_pending() == 3
    assert [s for s, *_ in scalars(tmp_path)["loss"]] == [3, 4, 5]
    sink.close(timeout=1)


def test_an_unwritable_dir_turns_the_files_off_not_the_reporting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    recorder = Recorder()
    sink = EventFileSink(recorder, blocker / "tensorboard", interval=3600)
    sink.put("loss", 1.0, 1)
    assert sink.write_pending() == 0
    sink.put("loss", 0.5, 2)
    assert sink.flush(timeout=1)
    assert recorder.series("loss") == [(1, 1.0), (2, 0.5)]
    sink.close(timeout=1)


def test_get_sender_writes_event_files_for_a_task_with_a_checkpoint_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(sender_module, "from_env", lambda *a, **k: recorder)
    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("STRATA_TASK", "chief:0")
    monkeypatch.delenv(DIR_ENV, raising=False)
    previous = process_sink.set_sender(None)
    try:
        sink = process_sink.get_sender()
        assert isinstance(sink, EventFileSink) and sink.inner is recorder
        from agents import runtime

        runtime.report("custom/thing", 3.0, 7)
        assert runtime.flush(timeout=1)
        assert scalars(tmp_path / "tensorboard" / "chief-0")["custom/thing"][0][:2] == (7, 3.0)
        sink.close(timeout=1)
    finally:
        process_sink.set_sender(previous)


def fit_and_read(model: Any, tmp_path: Path, epochs: int = 2) -> dict[str, Any]:
    recorder = Recorder()
    sink = EventFileSink(recorder, tmp_path / "chief-0", interval=0.05)
    features, labels = digits_like(256)
    model.fit(
        features,
        labels,
        batch_size=32,
        epochs=epochs,
        validation_data=(features[:64], labels[:64]),
        callbacks=make_callbacks(32, sink=sink),
        verbose=0,
    )
    sink.close(timeout=5)
    read = scalars(tmp_path / "chief-0")
    # Every streamed point is in the files, at the same step with the same value.
    for name in recorder.names():
        streamed = [(s, pytest.approx(v)) for s, v in recorder.series(name)]
        assert [(s, v) for s, v, _ in read[name]] == streamed, name
    return read


def test_tf_keras_fit_writes_epoch_batch_and_eval_curves(tmp_path: Path) -> None:
    read = fit_and_read(build_model(), tmp_path)
    assert [s for s, *_ in read["loss"]] == [8, 16]
    assert [s for s, *_ in read["eval/loss"]] == [8, 16]
    assert {"batch/loss", "epoch", "lr", "steps_per_sec", "examples_per_sec"} <= set(read)


def test_keras3_fit_writes_the_same_curves(tmp_path: Path) -> None:
    import keras

    model = keras.Sequential(
        [keras.layers.Input(shape=(16,)), keras.layers.Dense(8), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    read = fit_and_read(model, tmp_path)
    assert [s for s, *_ in read["loss"]] == [8, 16]
    assert {"batch/loss", "accuracy", "eval/loss"} <= set(read)
