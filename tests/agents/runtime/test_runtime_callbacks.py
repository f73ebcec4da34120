"""The runtime's metric callbacks, report() and the coordinator health poller.

A real (tiny) `model.fit` runs under the default strategy and under MirroredStrategy on the
CPU, with the sender replaced by an in-memory recorder. ParameterServerStrategy needs a
cluster of processes; its RemoteValues and coordinator internals are stood in for by fakes
with the same shape (the real thing is checked end to end elsewhere).
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from agents import runtime
from agents.protocol import CheckpointSaved, Command
from agents.runtime import process_sink, reporting
from agents.runtime.callbacks import learning_rate, strata_metrics_class
from agents.runtime.coordinator import CoordinatorHealth
from agents.runtime.metrics_tracker import MetricsTracker
from agents.runtime.sink import NullSender

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


class Recorder:
    """A MetricSink that keeps every point."""

    enabled = True

    def __init__(self) -> None:
        self.points: list[tuple[str, float, int, float]] = []
        self.lock = threading.Lock()
        self.thread_ids: set[int] = set()

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        with self.lock:
            self.points.append((name, float(value), int(step), wall_time or time.time()))

    def flush(self, timeout: float = 5.0) -> bool:
        return True

    def close(self, timeout: float = 5.0) -> None:
        return None

    def on_command(self, hook: Any) -> None:
        return None

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        return None

    def report_command_failed(self, command_id: int, reason: str) -> None:
        return None

    def series(self, name: str) -> list[tuple[int, float]]:
        with self.lock:
            return [(step, value) for n, value, step, _ in self.points if n == name]

    def names(self) -> set[str]:
        with self.lock:
            return {n for n, *_ in self.points}

    def wait_for(self, name: str, count: int = 1, timeout: float = 5.0) -> list[tuple[int, float]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.series(name)
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(f"{name}: {self.series(name)} after {timeout}s")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    sink = Recorder()
    monkeypatch.setattr(process_sink, "_instance", sink)
    monkeypatch.setattr(reporting, "_last_step", 0)
    yield sink


def increasing(series: list[tuple[int, float]]) -> bool:
    steps = [step for step, _ in series]
    return all(a < b for a, b in itertools.pairwise(steps))


# --- a real model.fit ---------------------------------------------------------------------


def digits_like(samples: int = 512) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(samples, 16)).astype("float32")
    labels = (features[:, 0] > 0).astype("int32")
    return features, labels


def build_model(learning_rate: Any = 0.01) -> Any:
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=(16,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


class SlowBatches:
    """Makes each batch take a little while, so that time-based reports happen."""

    def __new__(cls, seconds: float) -> Any:
        import tf_keras as keras

        class _Slow(keras.callbacks.Callback):  # type: ignore[misc]
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                time.sleep(seconds)

        return _Slow()


def check_fit_points(recorder: Recorder, epochs: int, steps: int, batch_size: int) -> None:
    ends = [steps * (epoch + 1) for epoch in range(epochs)]
    for name in ("loss", "accuracy", "val_loss", "val_accuracy", "epoch", "lr"):
        series = recorder.series(name)
        assert [step for step, _ in series] == ends, name
    assert [value for _, value in recorder.series("epoch")] == [1.0, 2.0, 3.0][:epochs]
    assert all(value == pytest.approx(0.01) for _, value in recorder.series("lr"))
    losses = [value for _, value in recorder.series("loss")]
    assert losses[-1] < losses[0]
    # The epoch's own throughput comes last in its series, at the epoch's end.
    rates = recorder.series("steps_per_sec")
    assert increasing(rates) and all(value > 0 for _, value in rates)
    assert set(ends) <= {step for step, _ in rates}
    examples = dict(recorder.series("examples_per_sec"))
    for step, rate in rates:
        assert examples[step] == pytest.approx(rate * batch_size)
    # Batch-level progress, at increasing steps inside the run.
    batch_losses = recorder.series("batch/loss")
    assert batch_losses, recorder.names()
    assert increasing(batch_losses)
    assert all(1 <= step <= ends[-1] for step, _ in batch_losses)
    assert "batch/accuracy" in recorder.names()
    # Validation inside fit also reports eval/<metric> at the epoch's step.
    assert [step for step, _ in recorder.series("eval/loss")] == ends


@pytest.mark.slow  # imports TensorFlow
def test_fit_under_the_default_strategy(recorder: Recorder) -> None:
    features, labels = digits_like()
    model = build_model()
    callback = strata_metrics_class()(32, batch_interval=0.05, throughput_interval=0.1)
    assert callback._supports_tf_logs
    started = time.perf_counter()
    model.fit(
        features,
        labels,
        batch_size=32,
        epochs=3,
        validation_data=(features[:64], labels[:64]),
        callbacks=[callback, SlowBatches(0.01)],
        verbose=0,
    )
    elapsed = time.perf_counter() - started
    check_fit_points(recorder, epochs=3, steps=16, batch_size=32)
    # Throttled: no more than one batch report per batch_interval (plus one per epoch).
    assert len(recorder.series("batch/loss")) <= elapsed / 0.05 + 3

    # A standalone evaluate reports eval/<metric> at the last training step, also from a
    # callback that never saw the training (the sidecar evaluator's case): the step of the
    # weights is then the optimizer's iteration count.
    model.evaluate(features, labels, batch_size=64, callbacks=[callback], verbose=0)
    assert recorder.series("eval/loss")[-1][0] == 48
    assert "eval/accuracy" in recorder.names()
    model.evaluate(features, labels, batch_size=64, callbacks=[strata_metrics_class()()], verbose=0)
    assert recorder.series("eval/loss")[-1][0] == 48


@pytest.mark.slow  # imports TensorFlow
def test_fit_under_mirrored_strategy(recorder: Recorder) -> None:
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = build_model()
    features, labels = digits_like(256)
    model.fit(
        features,
        labels,
        batch_size=32,
        epochs=2,
        validation_data=(features[:64], labels[:64]),
        callbacks=[
            strata_metrics_class()(32, batch_interval=0.02, throughput_interval=0.05),
            SlowBatches(0.01),
        ],
        verbose=0,
    )
    check_fit_points(recorder, epochs=2, steps=8, batch_size=32)


@pytest.mark.slow  # imports TensorFlow
def test_unknown_steps_per_epoch_go_on_from_the_restored_step(recorder: Recorder) -> None:
    # A dataset of unknown length gives no steps per epoch: the count starts from the
    # optimizer's iterations, which BackupAndRestore has set in a resumed process.
    import tensorflow as tf

    features, labels = digits_like()  # 16 batches of 32
    unknown_length = (
        tf.data.Dataset.from_tensor_slices((features, labels)).filter(lambda x, y: True).batch(32)
    )
    assert int(unknown_length.cardinality()) == int(tf.data.UNKNOWN_CARDINALITY)
    model = build_model()
    model.optimizer.iterations.assign(40)  # what a restored backup leaves
    callback = strata_metrics_class()(32)
    model.fit(unknown_length, epochs=2, callbacks=[callback], verbose=0)
    assert [step for step, _ in recorder.series("loss")] == [56, 72]
    # A second fit in the same process goes on from there. (Over a dataset of unknown
    # length tf_keras counts one iteration more than batches run, 73 here: the later count
    # wins, so the series keeps increasing.)
    start = max(72, int(model.optimizer.iterations.numpy()))
    model.fit(unknown_length, epochs=1, callbacks=[callback], verbose=0)
    assert [step for step, _ in recorder.series("loss")] == [56, 72, start + 16]


@pytest.mark.slow  # imports TensorFlow
def test_learning_rate_schedules_are_evaluated_at_the_step(recorder: Recorder) -> None:
    import tf_keras as keras

    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    model = build_model(schedule)
    features, labels = digits_like(320)
    model.fit(
        features,
        labels,
        batch_size=32,
        epochs=2,
        callbacks=[strata_metrics_class()()],
        verbose=0,
    )
    assert recorder.series("lr") == [
        (10, pytest.approx(0.05)),
        (20, pytest.approx(0.025)),
    ]
    assert learning_rate(object(), 5) is None
    assert "examples_per_sec" not in recorder.names()  # no batch size given


@pytest.mark.slow  # imports TensorFlow
def test_a_logged_learning_rate_is_not_reported_twice(recorder: Recorder) -> None:
    import tf_keras as keras

    model = build_model()
    features, labels = digits_like(128)
    halve = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5)
    model.fit(
        features,
        labels,
        batch_size=32,
        epochs=2,
        callbacks=[halve, strata_metrics_class()()],
        verbose=0,
    )
    assert recorder.series("lr") == [(4, pytest.approx(0.005)), (8, pytest.approx(0.0025))]


@pytest.mark.slow  # imports TensorFlow
def test_runtime_callbacks_when_reporting(recorder: Recorder) -> None:
    callbacks = runtime.callbacks(batch_size=64)
    assert [type(c).__name__ for c in callbacks] == ["KerasGuard", "StrataMetrics"]
    assert callbacks[1].tracker.batch_size == 64


@pytest.mark.slow  # imports TensorFlow
def test_a_failing_sink_never_breaks_training(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(Recorder):
        def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
            raise RuntimeError("boom")

    monkeypatch.setattr(process_sink, "_instance", Broken())
    features, labels = digits_like(128)
    model = build_model()
    history = model.fit(
        features, labels, batch_size=32, epochs=2, callbacks=runtime.callbacks(), verbose=0
    )
    assert len(history.history["loss"]) == 2


# --- ParameterServerStrategy, with fakes shaped like TF's internals ------------------------


class FakeRemoteValue:
    """Shaped like tf.distribute's RemoteValueImpl: fetch() and a status event."""

    def __init__(self, value: Any) -> None:
        self._value = value
        self._status_available_event = threading.Event()
        self.fetched_on: set[str] = set()

    def set_ready(self) -> None:
        self._status_available_event.set()

    def fetch(self) -> Any:
        self._status_available_event.wait()
        self.fetched_on.add(threading.current_thread().name)
        return self._value


def test_remote_batch_logs_are_resolved_off_the_training_thread(recorder: Recorder) -> None:
    tracker = MetricsTracker(
        64, sink=recorder, batch_interval=0.0, throughput_interval=0.0, watch_coordinator=False
    )
    tracker.train_begin({"steps": 8, "epochs": 1}, coordinator=object())
    tracker.epoch_begin(0)
    remote = [FakeRemoteValue({"loss": 1.0 / (i + 1), "accuracy": 0.5}) for i in range(4)]
    # None of them is ready: were scheduling to wait for a closure, this loop would hang.
    for chunk, value in enumerate(remote):  # steps_per_execution = 2
        tracker.batch_begin(chunk * 2)
        tracker.batch_end(chunk * 2 + 1, value)
    assert recorder.series("batch/loss") == []
    assert tracker.completed_step() == 0
    for value in remote[:3]:
        value.set_ready()
    found = recorder.wait_for("batch/loss", 3)
    assert found == [(2, 1.0), (4, 0.5), (6, pytest.approx(1 / 3))]
    assert tracker.completed_step() == 6
    assert all(v.fetched_on == {"strata-batch-metrics"} for v in remote[:3])
    rates = recorder.series("steps_per_sec")
    assert [step for step, _ in rates] == [2, 4, 6]
    assert dict(recorder.series("examples_per_sec"))[6] == pytest.approx(dict(rates)[6] * 64)

    remote[3].set_ready()
    recorder.wait_for("batch/loss", 4)
    tracker.epoch_end(0, {"loss": 0.2, "accuracy": 0.9}, lambda step: 0.01)
    tracker.train_end()
    assert recorder.series("loss") == [(8, 0.2)]
    assert recorder.series("epoch") == [(8, 1.0)]
    assert recorder.series("steps_per_sec")[-1][0] == 8


def test_unresolved_remote_values_of_a_finished_epoch_are_dropped(recorder: Recorder) -> None:
    tracker = MetricsTracker(sink=recorder, batch_interval=0.0, watch_coordinator=False)
    tracker.train_begin({"steps": 4}, coordinator=object())
    tracker.epoch_begin(0)
    never = FakeRemoteValue({"loss": 1.0})
    tracker.batch_begin(0)
    tracker.batch_end(3, never)  # one chunk of 4 steps
    tracker.epoch_end(0, {"loss": 0.5}, lambda step: None)
    never.set_ready()  # resolves after the epoch-end points: must not go out of order
    time.sleep(0.3)
    tracker.train_end()
    assert recorder.series("batch/loss") == []
    assert recorder.series("loss") == [(4, 0.5)]
    assert "lr" not in recorder.names()


def test_under_ps_the_learning_rate_is_read_off_the_training_thread(recorder: Recorder) -> None:
    """Under PS the rate is a variable on a parameter server: a round trip to read."""
    tracker = MetricsTracker(sink=recorder, batch_interval=0.0, watch_coordinator=False)
    tracker.train_begin({"steps": 4}, coordinator=object())
    readers: list[tuple[str, int]] = []

    def slow_rate(step: int) -> float:
        readers.append((threading.current_thread().name, step))
        time.sleep(0.1)
        return 0.01 * step

    waited = 0.0
    for epoch in range(3):
        tracker.epoch_begin(epoch)
        for batch in range(4):
            tracker.batch_begin(batch)
            tracker.batch_end(batch, None)
        started = time.perf_counter()
        tracker.epoch_end(epoch, {"loss": 0.5}, slow_rate)
        waited = max(waited, time.perf_counter() - started)
    assert waited < 0.05  # the epoch end never waits for the read
    tracker.train_end()  # gives the resolver a moment: the last epoch's rate is there too
    assert readers == [("strata-batch-metrics", step) for step in (4, 8, 12)]
    assert recorder.series("lr") == [(4, 0.04), (8, 0.08), (12, pytest.approx(0.12))]
    assert recorder.series("loss") == [(4, 0.5), (8, 0.5), (12, 0.5)]


def test_ps_batch_sampling_stride(recorder: Recorder) -> None:
    """Holding a step's RemoteValue makes TF copy its outputs back, so few are held."""
    tracker = MetricsTracker(sink=recorder, batch_interval=0.0, watch_coordinator=False)
    tracker.train_begin({"steps": 6400}, coordinator=object())

    def run_epoch(epoch: int) -> list[FakeRemoteValue]:
        tracker.epoch_begin(epoch)
        values = []
        for batch in range(6400):
            value = FakeRemoteValue({"loss": 1.0})
            value.set_ready()
            values.append(value)
            tracker.batch_begin(batch)
            tracker.batch_end(batch, value)
        time.sleep(0.2)  # let the resolver wait for what it holds
        tracker.epoch_end(epoch, {"loss": 1.0}, lambda _step: None)
        return [v for v in values if v.fetched_on]

    # Before the rate is known: a quarter epoch apart.
    assert len(run_epoch(0)) == 4
    # Then about one per second of training, from the rate epoch 0 had: 6400 steps here take
    # well under 10 s however loaded the machine is, so at most 10 (and on a quiet one, 1).
    stride = tracker.sample_stride
    assert stride >= 640
    assert len(run_epoch(1)) == math.ceil(6400 / stride)
    tracker.train_end()


@pytest.mark.slow  # imports TensorFlow
def test_report_takes_numbers_tensors_and_remote_values(recorder: Recorder) -> None:
    import tensorflow as tf

    pending = FakeRemoteValue(np.float32(0.25))
    runtime.report("loss", 1.5, 1)
    runtime.report("loss", tf.constant(0.5), 2)
    runtime.report("loss", pending, 3)  # returns although it is not ready: report never waits
    runtime.report("custom metric!", 7, 4)
    recorder.wait_for("loss", 2)
    time.sleep(0.05)
    assert recorder.series("loss") == [(1, 1.5), (2, 0.5)]
    pending.set_ready()
    assert recorder.wait_for("loss", 3)[-1] == (3, 0.25)
    assert recorder.series("custom_metric_") == [(4, 7.0)]
    assert reporting.last_step() == 4


# --- coordinator health ------------------------------------------------------------------


class FakeQueue:
    def __init__(self) -> None:
        import queue

        self._queue: queue.Queue[int] = queue.Queue()
        self.inflight_closure_count = 0
        self.finished = 0

    def mark_finished(self) -> None:
        self.finished += 1


class FakeWorker:
    def __init__(self, index: int, cluster: FakeCluster) -> None:
        self.worker_index = index
        self._is_dead_with_error: Any = None
        self._cluster = cluster

    def _on_closure_failure(self, closure: object, error: Exception) -> None:
        self._is_dead_with_error = error

    def _on_resource_closure_failure(self, error: Exception) -> None:
        self._is_dead_with_error = error

    def _on_worker_recovery(self) -> None:
        self._is_dead_with_error = False

    def process(self, closures: int) -> None:
        """Like WorkerClosureProcessingLoop-<i>: finishes closures on a named thread."""

        def run() -> None:
            for _ in range(closures):
                self._cluster.closure_queue.mark_finished()

        name = f"WorkerClosureProcessingLoop-{self.worker_index}"
        thread = threading.Thread(target=run, name=name)
        thread.start()
        thread.join()


class FakeCluster:
    def __init__(self, workers: int) -> None:
        self.closure_queue = FakeQueue()
        self.workers = [FakeWorker(i, self) for i in range(workers)]


class FakeCoordinator:
    def __init__(self, workers: int = 2) -> None:
        self._cluster = FakeCluster(workers)


def test_coordinator_health(recorder: Recorder) -> None:
    coordinator = FakeCoordinator(workers=2)
    health = CoordinatorHealth(coordinator, recorder, lambda: 40, interval=3600)
    cluster = coordinator._cluster
    for _ in range(3):
        cluster.closure_queue._queue.put(1)
    cluster.closure_queue.inflight_closure_count = 2
    cluster.workers[0].process(5)
    cluster.workers[1].process(7)
    assert cluster.closure_queue.finished == 12  # the original still runs

    health.poll()
    latest = {name: value for name, value, step, _ in recorder.points}
    assert {step for *_, step, _ in recorder.points} == {40}
    assert latest["coordinator/queue_depth"] == 3
    assert latest["coordinator/inflight"] == 2
    assert latest["coordinator/closures_done"] == 12
    assert latest["worker:0/closures_done"] == 5
    assert latest["worker:1/closures_done"] == 7
    assert latest["coordinator/workers_up"] == 2
    assert latest["coordinator/worker_failures"] == 0

    # Worker 1 fails (twice over: a closure and a resource closure) and comes back.
    worker = cluster.workers[1]
    worker._on_closure_failure(object(), RuntimeError("unavailable"))
    worker._on_resource_closure_failure(RuntimeError("unavailable"))
    health.poll()
    latest = {name: value for name, value, *_ in recorder.points}
    assert latest["worker:1/up"] == 0 and latest["coordinator/workers_up"] == 1
    assert latest["coordinator/worker_failures"] == 1
    worker._on_worker_recovery()
    health.poll()
    latest = {name: value for name, value, *_ in recorder.points}
    assert latest["worker:1/up"] == 1
    assert latest["coordinator/worker_recoveries"] == 1
    assert latest["worker:1/failures"] == 1
    assert "worker:1/resumed" not in latest  # back, but no closure finished there yet

    # Its first closure since then is reported once, stamped when it finished, not polled.
    cluster.workers[0].process(1)
    before_closure = time.time()
    worker.process(2)
    after_closure = time.time()
    time.sleep(0.05)
    health.poll()
    resumed = [(value, at) for name, value, _, at in recorder.points if name == "worker:1/resumed"]
    assert len(resumed) == 1 and resumed[0][0] == 1
    assert before_closure <= resumed[0][1] <= after_closure
    assert not any(name == "worker:0/resumed" for name, *_ in recorder.points)
    health.poll()
    assert len([name for name, *_ in recorder.points if name == "worker:1/resumed"]) == 1

    # Unchanged values are not reported again (until the heartbeat).
    before = len(recorder.points)
    health.poll()
    assert len(recorder.points) == before

    # A second watch of the same coordinator shares the counters (no double wrapping).
    again = CoordinatorHealth(coordinator, recorder, lambda: 41)
    assert again.counters is health.counters


def test_coordinator_health_without_the_internals(recorder: Recorder) -> None:
    class Bare:
        pass

    health = CoordinatorHealth(Bare(), recorder, lambda: 1)
    health.poll()
    assert recorder.points == []

    class NoQueueSize(FakeCoordinator):
        pass

    coordinator = NoQueueSize()
    del coordinator._cluster.closure_queue._queue
    health = CoordinatorHealth(coordinator, recorder, lambda: 1)
    health.poll()
    names = recorder.names()
    assert "coordinator/queue_depth" not in names
    assert "coordinator/inflight" in names
    health.start()
    health.stop()


def test_watch_coordinator_is_off_without_reporting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_sink, "_instance", NullSender())
    assert reporting.watch_coordinator(FakeCoordinator()) is None
    runtime.watch_coordinator(FakeCoordinator())  # nothing, and no error


def test_command_hooks_exist_on_every_sink() -> None:
    sink = NullSender()
    sink.on_command(lambda command: None)
    assert Command(id=1, action="checkpoint").action == "checkpoint"
