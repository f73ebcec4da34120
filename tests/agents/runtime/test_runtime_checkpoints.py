"""Checkpoints, checkpoint-now, BackupAndRestore and the sidecar evaluator, with real tf_keras.

A tiny model trains under the default strategy on the CPU; the sender is a recording fake
that implements the whole MetricSink protocol (points, checkpoint reports, command failures
and the command hook, through which the tests play the server).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents import runtime
from agents.protocol import CheckpointSaved, Command
from agents.runtime import checkpoints as ckpts
from agents.runtime.backup import backup_and_restore
from agents.runtime.callbacks import make_callbacks, strata_metrics_class
from agents.runtime.checkpoint_policy import (
    Candidate,
    CheckpointPolicy,
    KeepBest,
    checkpoints_to_keep,
    parse_policy,
)
from agents.runtime.checkpoints import (
    MWM_REFUSAL,
    NOT_TRAINING,
    CheckpointKeeper,
    strata_checkpoints_class,
)
from agents.runtime.evaluator import NotUnderStrata, run_sidecar_evaluator
from agents.runtime.sink import NullSender

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

pytestmark = pytest.mark.slow  # TensorFlow in the test process

BATCH = 16
SAMPLES = 64  # 4 steps per epoch


class FakeSink:
    """A MetricSink that records everything; `send()` plays a server command."""

    enabled = True

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.points: list[tuple[str, float, int]] = []
        self.saved: list[CheckpointSaved] = []
        self.failed: list[tuple[int, str]] = []
        self.hooks: list[Any] = []

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        with self.lock:
            self.points.append((name, float(value), int(step)))

    def flush(self, timeout: float = 5.0) -> bool:
        return True

    def close(self, timeout: float = 5.0) -> None:
        return None

    def on_command(self, hook: Any) -> None:
        self.hooks.append(hook)

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        with self.lock:
            self.saved.append(saved)

    def report_command_failed(self, command_id: int, reason: str) -> None:
        with self.lock:
            self.failed.append((command_id, reason))

    def send(self, command_id: int, action: str = "checkpoint") -> None:
        # Unvalidated, so that an action this runtime does not know can be played too.
        command = Command.model_construct(id=command_id, action=action)  # type: ignore[arg-type]
        for hook in list(self.hooks):
            hook(command)

    def series(self, name: str) -> list[tuple[int, float]]:
        with self.lock:
            return [(step, value) for n, value, step in self.points if n == name]


def data(samples: int = SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(samples, 8)).astype("float32")
    return features, (features[:, 0] > 0).astype("int32")


def build_model() -> Any:
    import tf_keras as keras

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


def fit(model: Any, callbacks: list[Any], epochs: int, samples: int = SAMPLES) -> None:
    features, labels = data(samples)
    model.fit(features, labels, batch_size=BATCH, epochs=epochs, callbacks=callbacks, verbose=0)


def saver(directory: Path, sink: FakeSink, **policy: Any) -> Any:
    return strata_checkpoints_class()(str(directory), CheckpointPolicy(**policy), sink=sink)


class Hooks:
    """Records on_epoch_begin, sleeps per batch, crashes at an epoch, runs `at_batch_one`
    when the first epoch's second batch begins: what the tests need."""

    def __new__(
        cls,
        sleep: float = 0.0,
        crash_at: int | None = None,
        at_batch_one: Callable[[], None] | None = None,
    ) -> Any:
        import tf_keras as keras

        class _Hooks(keras.callbacks.Callback):  # type: ignore[misc]
            epochs: list[int] = []

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                self.epochs.append(epoch)
                if epoch == crash_at:
                    raise Crash(f"crashing at epoch {epoch}")

            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                if batch == 1 and self.epochs == [0] and at_batch_one is not None:
                    at_batch_one()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                if sleep:
                    time.sleep(sleep)

        hooks = _Hooks()
        hooks.epochs = []
        return hooks


class Crash(Exception):
    pass


def files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def state(directory: Path) -> list[str]:
    import tensorflow as tf

    found = tf.train.get_checkpoint_state(str(directory))
    return [os.path.basename(p) for p in found.all_model_checkpoint_paths] if found else []


def size_on_disk(directory: Path, name: str) -> int:
    return sum(p.stat().st_size for p in directory.glob(f"{name}.*"))


# --- the pure parts ---------------------------------------------------------------------------


def test_retention_keeps_the_latest_and_the_best() -> None:
    def c(number: int, score: float | None = None) -> Candidate:
        return Candidate(f"ckpt-{number}", number, score)

    scores = [c(1, 0.9), c(2, 0.3), c(3, 0.5), c(4, 0.7), c(5, 0.6)]
    assert checkpoints_to_keep(scores, 2) == ["ckpt-4", "ckpt-5"]
    assert checkpoints_to_keep(scores, 2, "min") == ["ckpt-2", "ckpt-4", "ckpt-5"]
    assert checkpoints_to_keep(scores, 2, "max") == ["ckpt-1", "ckpt-4", "ckpt-5"]
    # The best among the latest adds nothing; order is by number, not by input order.
    assert checkpoints_to_keep(list(reversed(scores)), 4, "max") == [
        "ckpt-1",
        "ckpt-2",
        "ckpt-3",
        "ckpt-4",
        "ckpt-5",
    ]
    assert checkpoints_to_keep(scores, None) == [f"ckpt-{n}" for n in range(1, 6)]
    assert checkpoints_to_keep(scores, 0) == ["ckpt-5"]  # never fewer than one
    assert checkpoints_to_keep([], 3, "min") == []
    assert checkpoints_to_keep(scores[:2], 3) == ["ckpt-1", "ckpt-2"]  # fewer than `keep`
    # Ties: the earliest stays best (only a strict improvement replaces it).
    ties = [c(1, 0.5), c(2, 0.2), c(3, 0.2), c(4, 0.9), c(5, 0.9)]
    assert checkpoints_to_keep(ties, 1, "min") == ["ckpt-2", "ckpt-5"]
    assert checkpoints_to_keep(ties, 1, "max") == ["ckpt-4", "ckpt-5"]
    # No score (a mid-epoch checkpoint) or NaN: never best.
    unscored = [c(1), c(2, math.nan), c(3, 2.0), c(4), c(5)]
    assert checkpoints_to_keep(unscored, 1, "min") == ["ckpt-3", "ckpt-5"]
    assert checkpoints_to_keep([c(1), c(2)], 1, "max") == ["ckpt-2"]


def test_policy_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    raw = json.dumps(
        {
            "every_epochs": 2,
            "every_seconds": 30.5,
            "keep": 3,
            "keep_best": {"metric": "val_loss", "mode": "min"},
        }
    )
    assert parse_policy(raw) == CheckpointPolicy(2, 30.5, 3, KeepBest("val_loss", "min"))
    assert parse_policy('{"every_epochs": null, "keep_best": null}') == CheckpointPolicy(
        every_epochs=None
    )
    assert not parse_policy('{"every_epochs": null}').saves
    assert parse_policy(None) == CheckpointPolicy(1, None, 5, None)
    for bad in ("nope", "[]", '{"keep": 0}', '{"every_epochs": 1.5}', '{"keep_best": "loss"}'):
        with caplog.at_level(logging.WARNING, logger="strata.runtime"):
            assert parse_policy(bad) == CheckpointPolicy()
    assert "STRATA_CHECKPOINT_POLICY" in caplog.text


def test_make_callbacks_outside_and_inside_strata(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("STRATA_CHECKPOINT_DIR", raising=False)
    assert make_callbacks(sink=NullSender()) == []
    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("STRATA_CHECKPOINT_POLICY", '{"every_epochs": 3, "keep": 2}')
    names = [type(c).__name__ for c in make_callbacks(sink=FakeSink())]
    assert names == ["KerasGuard", "StrataBackup", "StrataMetrics", "StrataCheckpoints"]
    # Checkpoints are kept even when no metrics go anywhere (a dir set by hand).
    callbacks = make_callbacks(sink=NullSender())
    assert [type(c).__name__ for c in callbacks] == [
        "KerasGuard",
        "StrataBackup",
        "StrataCheckpoints",
    ]
    import tf_keras as keras

    backup = callbacks[1]
    backup.set_model(build_model())
    backup.on_train_begin()  # the real callback is made once fit begins
    assert isinstance(backup.inner, keras.callbacks.BackupAndRestore)  # the model's Keras
    assert backup.inner.backup_dir == str(tmp_path / "backup")
    assert callbacks[2].keeper.policy == CheckpointPolicy(every_epochs=3, keep=2)
    assert callbacks[2]._supports_tf_logs


# --- saving during fit -------------------------------------------------------------------------


def test_epoch_saves_are_listed_and_reported(tmp_path: Path) -> None:
    import tensorflow as tf

    sink = FakeSink()
    model = build_model()
    fit(model, [saver(tmp_path, sink, every_epochs=1, keep=10)], epochs=3)

    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-3")
    assert state(tmp_path) == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert [s.name for s in sink.saved] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert [s.trigger for s in sink.saved] == ["epoch"] * 3  # nothing changed after: no "end"
    assert [s.step for s in sink.saved] == [4, 8, 12]
    assert [s.epoch for s in sink.saved] == [1, 2, 3]
    for saved in sink.saved:
        assert saved.size_bytes == size_on_disk(tmp_path, saved.name) > 0
        assert set(saved.metrics) == {"loss", "accuracy"}
        assert saved.command_id is None and saved.deleted == []
    assert sink.saved[-1].metrics["loss"] == pytest.approx(model.history.history["loss"][-1])
    # The files hold the model and the optimizer at that step.
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt-2"))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 8


def test_every_seconds_saves_at_batch_ends(tmp_path: Path) -> None:
    sink = FakeSink()
    callbacks = [Hooks(sleep=0.04), saver(tmp_path, sink, every_epochs=None, every_seconds=0.15)]
    fit(build_model(), callbacks, epochs=1, samples=16 * BATCH)  # 16 steps, about 0.7 s

    triggers = [s.trigger for s in sink.saved]
    assert triggers.count("time") >= 2, triggers
    assert set(triggers) <= {"time", "end"} and "end" not in triggers[:-1]
    steps = [s.step for s in sink.saved]
    assert steps == sorted(set(steps))
    assert all(0 < s.step <= 16 for s in sink.saved if s.trigger == "time")
    assert steps[-1] == 16  # the last steps are saved at train end, unless a time save was
    assert all(s.epoch == 0 for s in sink.saved if s.trigger == "time")  # none completed


def test_a_command_is_saved_at_the_next_batch_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = FakeSink()
    callback = saver(tmp_path, sink, every_epochs=None)
    keeper: CheckpointKeeper = callback.keeper
    writers: list[str] = []
    write = CheckpointKeeper._write

    def recording_write(self: CheckpointKeeper, *args: Any) -> Any:
        writers.append(threading.current_thread().name)
        return write(self, *args)

    monkeypatch.setattr(CheckpointKeeper, "_write", recording_write)
    issued: list[int] = []

    def server() -> None:
        deadline = time.monotonic() + 10
        while keeper.batches < 4 and time.monotonic() < deadline:
            time.sleep(0.005)
        issued.append(keeper.batches)
        sink.send(7, "stop")  # not ours: ignored
        sink.send(42)

    thread = threading.Thread(target=server, name="fake-sender")
    thread.start()
    fit(build_model(), [Hooks(sleep=0.03), callback], epochs=1, samples=20 * BATCH)
    thread.join()

    assert len(sink.saved) == 1 and sink.failed == []
    saved = sink.saved[0]
    assert (saved.trigger, saved.command_id, saved.name) == ("command", 42, "ckpt-1")
    assert issued[0] <= saved.step <= issued[0] + 2 < 20  # the next step boundary
    assert writers == ["MainThread"]  # written by the training thread, not the sender's
    assert state(tmp_path) == ["ckpt-1"]

    # No fit running: refused rather than written behind the training loop's back.
    sink.send(43)
    assert sink.failed == [(43, NOT_TRAINING)]
    assert len(sink.saved) == 1


def test_a_failed_save_answers_the_command_and_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import tensorflow as tf

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(tf.train.Checkpoint, "write", broken)
    sink = FakeSink()
    callback = saver(tmp_path, sink, every_epochs=1)

    model = build_model()
    with caplog.at_level(logging.WARNING, logger="strata.runtime"):
        fit(model, [Hooks(at_batch_one=lambda: sink.send(9)), callback], epochs=2)
    assert len(model.history.history["loss"]) == 2
    assert sink.saved == []
    assert [(i, "disk full" in reason) for i, reason in sink.failed] == [(9, True)]
    assert "epoch checkpoint failed" in caplog.text


def test_retention_deletes_files_and_reports_them(tmp_path: Path) -> None:
    sink = FakeSink()
    callback = saver(tmp_path, sink, every_epochs=1, keep=1, keep_best=KeepBest("loss", "max"))
    fit(build_model(), [callback], epochs=4)

    losses = [s.metrics["loss"] for s in sink.saved]
    best = f"ckpt-{losses.index(max(losses)) + 1}"
    kept = sorted({best, "ckpt-4"})
    assert state(tmp_path) == kept
    assert {n.split(".")[0] for n in files(tmp_path) if n.startswith("ckpt-")} == set(kept)
    deleted = [name for s in sink.saved for name in s.deleted]
    assert sorted(deleted) == sorted({"ckpt-1", "ckpt-2", "ckpt-3"} - {best})
    for name in deleted:
        assert not list(tmp_path.glob(f"{name}.*"))


def test_numbering_goes_on_in_a_dir_with_checkpoints(tmp_path: Path) -> None:
    first = FakeSink()
    fit(build_model(), [saver(tmp_path, first, keep=3)], epochs=2)
    assert [s.name for s in first.saved] == ["ckpt-1", "ckpt-2"]
    assert [s.deleted for s in first.saved] == [[], []]
    (tmp_path / "ckpt-7.data-00000-of-00001").write_bytes(b"")  # a write cut short

    second = FakeSink()  # a restarted chief: a new process, model and callback
    fit(build_model(), [saver(tmp_path, second, keep=3)], epochs=2)
    assert [s.name for s in second.saved] == ["ckpt-8", "ckpt-9"]
    assert [s.deleted for s in second.saved] == [[], ["ckpt-1"]]
    assert state(tmp_path) == ["ckpt-2", "ckpt-8", "ckpt-9"]
    manifest = json.loads((tmp_path / ckpts.MANIFEST).read_text())["checkpoints"]
    assert sorted(manifest) == ["ckpt-2", "ckpt-8", "ckpt-9"]
    assert manifest["ckpt-2"]["step"] == 8 and manifest["ckpt-2"]["fresh"] is True


def test_multi_worker_mirrored_roles(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sink = FakeSink()
    keeper = CheckpointKeeper(str(tmp_path), CheckpointPolicy(every_seconds=0.01), sink)
    model = build_model()
    keeper.train_begin(model)
    with caplog.at_level(logging.WARNING, logger="strata.runtime"):
        keeper.configure("multi_worker_mirrored", chief=False)
    assert "every_seconds" in caplog.text
    assert keeper.due == math.inf  # no time-based saves
    sink.send(5)
    assert sink.failed == [(5, MWM_REFUSAL)]
    # A worker that is not the chief takes part in the save, then deletes what it wrote.
    keeper.batches += 4
    keeper.epoch_end(0, {"loss": 1.0})
    assert sink.saved == []
    assert not [n for n in files(tmp_path) if n.startswith(("ckpt-", "workertemp"))]
    keeper.train_end()
    sink.send(6)
    assert sink.failed[-1] == (6, NOT_TRAINING)


# --- BackupAndRestore -------------------------------------------------------------------------


def test_backup_and_restore_resumes_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv(
        "STRATA_CHECKPOINT_POLICY",
        '{"every_epochs": 1, "keep": 10, "backup_every_seconds": 0}',
    )
    first = FakeSink()
    crashing = Hooks(crash_at=2)
    with pytest.raises(Crash):
        fit(build_model(), [*make_callbacks(sink=first), crashing], epochs=4)
    assert crashing.epochs == [0, 1, 2]
    assert [s.name for s in first.saved] == ["ckpt-1", "ckpt-2"]

    second = FakeSink()  # the restarted chief
    model = build_model()
    resumed = Hooks()
    fit(model, [*make_callbacks(sink=second), resumed], epochs=4)
    assert resumed.epochs == [2, 3]  # on_epoch_begin gets the absolute epoch
    assert int(model.optimizer.iterations.numpy()) == 16  # the step was restored too
    assert [(s.name, s.step, s.epoch) for s in second.saved] == [
        ("ckpt-3", 12, 3),
        ("ckpt-4", 16, 4),
    ]
    # StrataMetrics goes on counting: steps from epoch * steps_per_epoch, epochs 1-based.
    assert second.series("epoch") == [(12, 3.0), (16, 4.0)]
    assert [step for step, _ in second.series("loss")] == [12, 16]
    assert not list((tmp_path / "backup").glob("*"))  # a finished fit drops its backup


@pytest.mark.parametrize(
    ("every_seconds", "resumed_at"),
    # Epochs end 10, 20, 30 and 40 s into training; it crashes as epoch 4 begins.
    [(0.0, 4), (25.0, 3), (45.0, 0)],
)
def test_backups_wait_for_their_interval(
    tmp_path: Path, every_seconds: float, resumed_at: int
) -> None:
    import tf_keras as keras

    now = [0.0]

    class Clock(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            now[0] += 10.0  # before the backup's own epoch-end hook: it runs after this one

    def clock() -> float:
        return now[0]

    def backup() -> Any:
        return backup_and_restore(str(tmp_path), every_seconds, clock)

    with pytest.raises(Crash):
        fit(build_model(), [Clock(), backup(), Hooks(crash_at=4)], epochs=6)
    resumed = Hooks()
    fit(build_model(), [backup(), resumed], epochs=6)
    assert resumed.epochs == list(range(resumed_at, 6))


class Steps:
    """Records (epoch, batch) at each batch begin; plays `at` once at (epoch, batch) begin and
    crashes at `crash_at` (the task being stopped)."""

    def __new__(
        cls,
        at: tuple[int, int] | None = None,
        play: Callable[[], None] | None = None,
        crash_at: tuple[int, int] | None = None,
    ) -> Any:
        import tf_keras as keras

        class _Steps(keras.callbacks.Callback):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.epoch = -1
                self.seen: list[tuple[int, int]] = []

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                self.epoch = epoch

            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                self.seen.append((self.epoch, batch))
                if (self.epoch, batch) == at and play is not None:
                    play()
                if (self.epoch, batch) == crash_at:
                    raise Crash(f"stopped at epoch {self.epoch}, batch {batch}")

        return _Steps()


def interrupt_command(sink: FakeSink, command_id: int, hold_seconds: float = 0.0) -> None:
    command = Command(id=command_id, action="interrupt", hold_seconds=hold_seconds)
    for hook in list(sink.hooks):
        hook(command)


def test_an_interruption_backs_up_mid_epoch_and_the_resumed_fit_goes_on_at_the_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("STRATA_CHECKPOINT_POLICY", '{"every_epochs": 1, "keep": 10}')
    first = FakeSink()
    # Asked as epoch 1's batch 1 begins: served at its end (step 4 + 2), then stopped.
    stopped = Steps(at=(1, 1), play=lambda: interrupt_command(first, 9), crash_at=(1, 2))
    with pytest.raises(Crash):
        fit(build_model(), [*make_callbacks(sink=first), stopped], epochs=4)
    assert [(s.name, s.step, s.trigger, s.command_id) for s in first.saved] == [
        ("ckpt-1", 4, "epoch", None),
        ("ckpt-2", 6, "interruption", 9),
    ]
    assert first.failed == []

    second = FakeSink()
    model = build_model()
    resumed = Steps()
    fit(model, [*make_callbacks(sink=second), resumed], epochs=4)
    assert resumed.seen[0] == (1, 2)  # not one step lost, none run twice
    assert len(resumed.seen) == 16 - 6
    assert int(model.optimizer.iterations.numpy()) == 16


def test_an_interruption_holds_training_for_its_hold_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(tmp_path))
    sink = FakeSink()
    order: list[str] = []
    monkeypatch.setattr(ckpts, "hold_training", lambda seconds: order.append(f"hold {seconds}"))
    steps = Steps(at=(0, 1), play=lambda: interrupt_command(sink, 3, hold_seconds=1.5))
    original = steps.on_train_batch_begin

    def noted(batch: int, logs: Any = None) -> None:
        order.append(f"batch {batch}")
        original(batch, logs)

    steps.on_train_batch_begin = noted
    fit(build_model(), [*make_callbacks(sink=sink), steps], epochs=1)
    assert [s.trigger for s in sink.saved] == ["interruption", "epoch"]
    # Training held after the interruption's save, before the next batch.
    assert order[:4] == ["batch 0", "batch 1", "hold 1.5", "batch 2"]


def test_the_backup_interval_comes_from_the_policy() -> None:
    assert parse_policy(None).backup_every_seconds == 30.0
    assert parse_policy('{"backup_every_seconds": 0}').backup_every_seconds == 0.0
    assert parse_policy('{"backup_every_seconds": 2.5}').backup_every_seconds == 2.5
    assert parse_policy('{"backup_every_seconds": -1}') == CheckpointPolicy()  # warned, default


# --- the sidecar evaluator -----------------------------------------------------------------------


def two_checkpoints(directory: Path) -> tuple[dict[str, float], Any]:
    """Trains two epochs into `directory` (ckpt-1 at step 4, ckpt-2 at step 8); returns the
    trained model's evaluation and the same data as a dataset for the evaluator."""
    import tensorflow as tf

    trainer = FakeSink()
    trained = build_model()
    fit(trained, [saver(directory, trainer)], epochs=2)
    assert [(s.name, s.step) for s in trainer.saved] == [("ckpt-1", 4), ("ckpt-2", 8)]
    features, labels = data()
    final = trained.evaluate(features, labels, batch_size=BATCH, verbose=0, return_dict=True)
    return final, tf.data.Dataset.from_tensor_slices((features, labels)).batch(BATCH)


def test_sidecar_evaluator_reports_each_checkpoint_at_its_step(tmp_path: Path) -> None:
    expected, eval_data = two_checkpoints(tmp_path)
    sink = FakeSink()
    evaluator_model = build_model()  # fresh weights: everything comes from the checkpoint
    started = time.monotonic()
    run_sidecar_evaluator(
        evaluator_model, eval_data, directory=str(tmp_path), sink=sink, max_evaluations=2
    )
    assert time.monotonic() - started < 20
    assert sink.series("eval/loss") == [(8, pytest.approx(expected["loss"], rel=1e-5))]
    assert sink.series("eval/accuracy") == [(8, pytest.approx(expected["accuracy"]))]


@pytest.mark.parametrize("newer_checkpoint", [True, False])
def test_sigterm_evaluates_the_newest_checkpoint_then_exits(
    tmp_path: Path, newer_checkpoint: bool
) -> None:
    # Training has ended: the chief wrote its final checkpoint and the agent stops the
    # evaluator before its loop has seen it. It is evaluated once, and nothing twice.
    final, eval_data = two_checkpoints(tmp_path)
    ckpts._update_state(str(tmp_path), "ckpt-1", ["ckpt-1"])  # ckpt-2 not yet announced

    import signal

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # else the evaluator keeps off
    sink = FakeSink()

    def stop_after_the_first_evaluation() -> None:
        deadline = time.monotonic() + 60
        while not sink.series("eval/loss") and time.monotonic() < deadline:
            time.sleep(0.01)
        if newer_checkpoint:
            ckpts._update_state(str(tmp_path), "ckpt-2", ["ckpt-1", "ckpt-2"])
        os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_after_the_first_evaluation, daemon=True)
    stopper.start()
    with pytest.raises(SystemExit) as exited:
        run_sidecar_evaluator(build_model(), eval_data, directory=str(tmp_path), sink=sink)
    stopper.join(5)
    assert exited.value.code == 0
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    steps = [step for step, _ in sink.series("eval/loss")]
    assert steps == ([4, 8] if newer_checkpoint else [4])
    if newer_checkpoint:
        assert sink.series("eval/loss")[-1] == (8, pytest.approx(final["loss"], rel=1e-5))


def test_a_sigterm_between_the_report_and_its_record_reports_the_step_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SIGTERM lands just after the evaluation of ckpt-1 is reported, before its step is
    # recorded: the stop must wait for the record, or the newest checkpoint (still ckpt-1) is
    # evaluated and reported again.
    _final, eval_data = two_checkpoints(tmp_path)
    ckpts._update_state(str(tmp_path), "ckpt-1", ["ckpt-1"])

    import signal

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # else the evaluator keeps off
    metrics: Any = strata_metrics_class()
    report = metrics.on_test_end
    signalled: list[int] = []

    def report_then_sigterm(self: Any, logs: Any = None) -> None:
        report(self, logs)
        if not signalled:
            signalled.append(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)  # the handler runs before this call returns

    monkeypatch.setattr(metrics, "on_test_end", report_then_sigterm)
    sink = FakeSink()
    with pytest.raises(SystemExit) as exited:
        run_sidecar_evaluator(build_model(), eval_data, directory=str(tmp_path), sink=sink)
    assert exited.value.code == 0
    assert signalled == [signal.SIGTERM]
    assert [step for step, _ in sink.series("eval/loss")] == [4]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("sigterm", [True, False])
def test_a_sigterm_that_native_code_turned_into_another_error_still_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigterm: bool
) -> None:
    # A SIGTERM whose exception is raised while TensorFlow's C++ builds an error of its own
    # comes out as pybind11's RuntimeError. After a SIGTERM it is the stop; without one, an
    # error like it is the script's and goes up.
    _final, eval_data = two_checkpoints(tmp_path)
    ckpts._update_state(str(tmp_path), "ckpt-1", ["ckpt-1"])

    import signal

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # else the evaluator keeps off

    metrics: Any = strata_metrics_class()
    begin = metrics.on_test_begin
    calls: list[None] = []

    def begin_in_native_code(self: Any, logs: Any = None) -> None:
        calls.append(None)
        if len(calls) > 1:
            begin(self, logs)
            return
        replaced: BaseException | None = None
        try:
            if sigterm:
                signal.raise_signal(signal.SIGTERM)
        except BaseException as exc:
            replaced = exc
        raise RuntimeError(f"pybind11::error_already_set: MISMATCH, REPLACED BY {replaced!r}")

    monkeypatch.setattr(metrics, "on_test_begin", begin_in_native_code)
    sink = FakeSink()
    expected: type[BaseException] = SystemExit if sigterm else RuntimeError
    with pytest.raises(expected):
        run_sidecar_evaluator(build_model(), eval_data, directory=str(tmp_path), sink=sink)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    # With the stop, the newest checkpoint is evaluated (once) before the exit.
    assert [step for step, _ in sink.series("eval/loss")] == ([4] if sigterm else [])


def test_sidecar_evaluator_needs_strata(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_CHECKPOINT_DIR", raising=False)
    with pytest.raises(NotUnderStrata, match="STRATA_CHECKPOINT_DIR"):
        runtime.sidecar_evaluator(object(), [])
    assert issubclass(NotUnderStrata, RuntimeError)
    assert "sidecar_evaluator" in runtime.__all__
    assert strata_metrics_class() is strata_metrics_class()


def test_an_interruption_served_at_an_epoch_end_resumes_at_the_next_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tf_keras as keras

    monkeypatch.setenv("STRATA_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("STRATA_CHECKPOINT_POLICY", '{"every_epochs": 5, "keep": 10}')
    first = FakeSink()

    class AtLastBatchEnd(keras.callbacks.Callback):  # type: ignore[misc]
        """Asks after the checkpoints' batch hook has run: served at the epoch's end."""

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 3 and not first.saved:
                interrupt_command(first, 4)

    stopped = Steps(crash_at=(1, 0))
    with pytest.raises(Crash):
        fit(build_model(), [*make_callbacks(sink=first), AtLastBatchEnd(), stopped], epochs=3)
    assert [(s.step, s.trigger) for s in first.saved] == [(4, "interruption")]
    assert first.failed == []
    resumed = Steps()
    fit(build_model(), [*make_callbacks(sink=FakeSink()), resumed], epochs=3)
    assert resumed.seen[0] == (1, 0)
