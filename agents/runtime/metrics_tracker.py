"""What the Keras callback `StrataMetrics` (agents.runtime.callbacks) reports, free of Keras:
`MetricsTracker`, which the callback's hooks drive.

What it reports (step = the global training step, counted locally, see below):

* at each epoch end, the authoritative values: every scalar in the epoch-end logs (``loss``,
  ``accuracy``, ``val_loss``, ...), ``epoch`` (epochs completed, 1-based), ``lr`` (the
  optimizer's learning rate; a schedule is evaluated at the step; under
  ParameterServerStrategy it is read on the resolver thread, since the optimizer's variables
  live on the parameter servers), ``steps_per_sec`` and,
  when the global batch size is known, ``examples_per_sec`` (averaged over the epoch's
  training, validation excluded);
* during an epoch, at most every `batch_interval` seconds: ``batch/<name>`` for each scalar
  of the latest batch logs, and every `throughput_interval` seconds ``steps_per_sec`` (and
  ``examples_per_sec``) over the time since the last such point;
* at the end of an evaluation (`model.evaluate`, or validation inside `fit`):
  ``eval/<name>``, at the current training step inside `fit`, and outside it at the
  optimizer's iteration count (the step of the evaluated weights: what the sidecar evaluator
  restores from each checkpoint) where that is local;
* under ParameterServerStrategy on the chief, the coordinator's health (see
  `agents.runtime.coordinator`): ``coordinator/*`` and ``worker:<i>/*`` about once a second.

The training thread only counts, timestamps and appends to a queue. Batch logs are tensors
(or, under ParameterServerStrategy, a `RemoteValue` per `steps_per_execution` chunk, whose
closure may still be queued when the hook runs); a resolver thread waits for and converts
them, so the training thread never syncs or calls `coordinator.join()` for a report.

Steps are counted from the batch index and ``params["steps"]`` (epoch * steps + batch + 1),
never read from model variables, which live on the parameter servers under PS. Only when
steps per epoch are unknown (a dataset of unknown length, never under PS) does the count go on
from the optimizer's iteration count, read once per fit: a process that resumed from a backup
continues the series instead of starting again at 0. Under PS the batch hook runs when a chunk
is *scheduled*: a batch point is reported when its RemoteValue resolves (the chunk has run), at
the step it was scheduled for.

Like agents.runtime.callbacks, which imports it eagerly, it imports neither TensorFlow nor
the sender at import time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agents.runtime import values as tfvalues
from agents.runtime.batch_resolver import BatchResolver
from agents.runtime.progress import training_progress
from agents.runtime.values import sanitize_name

if TYPE_CHECKING:
    from agents.runtime.coordinator import CoordinatorHealth
    from agents.runtime.sink import MetricSink

log = logging.getLogger("strata.runtime")

BATCH_INTERVAL = 0.5  # seconds between batch-level reports
THROUGHPUT_INTERVAL = 2.0  # seconds between in-epoch throughput points
# Under PS a step's outputs are copied back to the chief only while something holds its
# RemoteValue, and holding every step's slows training noticeably. So only a sample is
# held: about one per PS_SAMPLE_SECONDS of training (a quarter epoch until the rate is known).
PS_SAMPLE_SECONDS = 1.0
PS_FIRST_EPOCH_SAMPLES = 4
STOP_WAIT = 2.0  # seconds train_end gives the resolver for its last reads (under PS)


class MetricsTracker:
    """The callback's logic, free of Keras so that it can be driven directly."""

    def __init__(
        self,
        batch_size: int | None = None,
        *,
        sink: MetricSink | None = None,
        batch_interval: float = BATCH_INTERVAL,
        throughput_interval: float = THROUGHPUT_INTERVAL,
        watch_coordinator: bool = True,
    ) -> None:
        self._sink_override = sink
        self.batch_size = batch_size if batch_size and batch_size > 0 else None
        self._batch_interval = batch_interval
        self._watch_coordinator = watch_coordinator
        self._resolver = BatchResolver(
            self.sink,
            batch_interval=batch_interval,
            throughput_interval=throughput_interval,
            batch_size=self.batch_size,
        )
        self._health: CoordinatorHealth | None = None
        self._steps: int | None = None
        self._remote = False
        self._stride = 1
        self._next_offer_step = 0
        self._last_offer = float("-inf")
        self._epoch_base = 0
        self._epoch_start: tuple[int, float] | None = None
        self._train_done_at: float | None = None
        self._epoch_boundary = False  # between an epoch's end and the next one's beginning
        self._in_fit = False
        self._seeded = False  # this fit's count was set from the optimizer's (epoch_begin)
        self.step = 0  # global step after the last batch (scheduled, under PS)

    def sink(self) -> MetricSink:
        if self._sink_override is not None:
            return self._sink_override
        from agents.runtime.process_sink import get_sender

        return get_sender()

    @property
    def sample_stride(self) -> int:
        """Under PS, the steps between two RemoteValues held for their outputs."""
        return self._stride

    @property
    def epoch_started(self) -> bool:
        return self._epoch_start is not None

    def completed_step(self) -> int:
        return max(self._resolver.completed_step, 0)

    def trained_step(self) -> int:
        """The step training is known to have reached: under PS the last one seen to run;
        before a resumed fit's first step, where its epoch starts."""
        done = self.completed_step() if self._remote else self.step
        return max(done, self._epoch_base)

    # --- hooks ------------------------------------------------------------------------------

    def train_begin(self, params: Mapping[str, Any], coordinator: Any = None) -> None:
        steps = params.get("steps")
        self._steps = steps if isinstance(steps, int) and steps > 0 else None
        self._remote = coordinator is not None
        self._stride = max(1, (self._steps or 0) // PS_FIRST_EPOCH_SAMPLES) if self._remote else 1
        self._in_fit = True
        self._seeded = False
        self._resolver.start()
        from agents.runtime.stacks import install as install_stacks

        install_stacks()  # idempotent; for a strategy built without runtime.strategy()
        epochs = params.get("epochs")
        training_progress().begin(
            self.trained_step,
            steps=self._steps,
            epochs=epochs if isinstance(epochs, int) else None,
        )
        if self._remote and self._watch_coordinator and self._health is None:
            from agents.runtime.coordinator import CoordinatorHealth

            self._health = CoordinatorHealth(coordinator, self.sink(), self.completed_step)
            self._health.start()

    def epoch_begin(self, epoch: int, trained_step: Callable[[], int | None] | None = None) -> None:
        if self._steps is None and not self._seeded and trained_step is not None:
            # Steps per epoch unknown: the count goes on from this process's own, which starts
            # at 0 in a process that resumed from a backup. The optimizer's iteration count is
            # the restored step; it is read here, after every on_train_begin (where
            # BackupAndRestore restores), once per fit, and never under PS (where it is remote
            # and steps per epoch are required anyway).
            self._seeded = True
            try:
                restored = trained_step()
            except Exception as exc:
                log.debug("strata: cannot read the trained step: %r", exc)
                restored = None
            if restored is not None and restored > self.step:
                self.step = restored
        self._epoch_base = epoch * self._steps if self._steps is not None else self.step
        progress = training_progress()
        progress.epoch_begin(epoch)
        if self._epoch_boundary:
            self._epoch_boundary = False
            progress.leave("checkpointing")
        self._epoch_start = None
        self._train_done_at = None
        self._next_offer_step = 0
        self._resolver.new_window(None)

    def batch_begin(self, batch: int) -> None:
        if self._epoch_start is None:
            self._epoch_start = (self._epoch_base + batch, time.monotonic())
            end = self._epoch_base + self._steps if self._steps is not None else None
            self._resolver.new_window(self._epoch_start, end)

    def batch_end(self, batch: int, logs: object) -> None:
        step = self._epoch_base + batch + 1
        self.step = step
        if logs is None:
            return
        if self._remote:
            # Scheduled, not run: queue a sample of the chunks' RemoteValues to wait for.
            if step >= self._next_offer_step:
                self._next_offer_step = step + self._stride
                self._resolver.offer(step, logs, time.monotonic())
            return
        now = time.monotonic()
        if now - self._last_offer >= self._batch_interval:
            self._last_offer = now
            self._resolver.offer(step, logs, now)

    def test_begin(self) -> None:
        if self._in_fit and self._train_done_at is None:
            self._train_done_at = time.monotonic()
            training_progress().enter("evaluating")  # until the epoch ends (epoch_end)

    def epoch_end(
        self, epoch: int, logs: Mapping[str, Any] | None, lr: Callable[[int], float | None]
    ) -> None:
        done_at = self._train_done_at or time.monotonic()
        progress = training_progress()
        if self._train_done_at is not None:
            progress.leave("evaluating")
        # The epoch's end (checkpoints, backups, other callbacks) until the next epoch begins:
        # no step runs there either.
        progress.enter("checkpointing")
        self._epoch_boundary = True
        self._train_done_at = None
        step = self.step if self._epoch_start is not None else self._epoch_base + (self._steps or 0)
        self.step = step
        self._resolver.new_window(None)
        self._resolver.completed_step = max(self._resolver.completed_step, step)
        sink = self.sink()
        wall = time.time()
        numbers = tfvalues.scalars(dict(logs or {}))
        for name, value in numbers.items():
            sink.put(sanitize_name(name), value, step, wall)
        sink.put("epoch", float(epoch + 1), step, wall)
        if "lr" not in numbers:  # LearningRateScheduler and ReduceLROnPlateau log it already
            if self._remote:
                # Under PS the optimizer's variables live on the parameter servers: reading
                # the rate is a round trip, which the training thread would wait for at every
                # epoch end. The resolver thread reads it instead, for the same step.
                self._resolver.call_soon(lambda: _report_rate(sink, lr, step, wall))
            else:
                _report_rate(sink, lr, step, wall)
        if self._epoch_start is not None:
            first, started = self._epoch_start
            elapsed = done_at - started
            if step > first and elapsed > 0:
                steps_per_sec = (step - first) / elapsed
                if self._remote:
                    self._stride = max(1, round(steps_per_sec * PS_SAMPLE_SECONDS))
                sink.put("steps_per_sec", steps_per_sec, step, wall)
                if self.batch_size:
                    sink.put("examples_per_sec", steps_per_sec * self.batch_size, step, wall)
        self._epoch_start = None

    def test_end(
        self, logs: Mapping[str, Any] | None, trained_step: Callable[[], int | None] | None = None
    ) -> None:
        """eval/<name> at the training step: ours inside fit; outside it (a standalone evaluate,
        the sidecar evaluator) `trained_step()`, the step of the weights, when it is known."""
        if not self._in_fit:
            training_progress().leave("evaluating")
        # Inside fit the evaluation lasts until the epoch ends: what comes after on_test_end
        # (its input pipeline winding down) holds the step still too.
        sink = self.sink()
        wall = time.time()
        step = self.step
        if not self._in_fit and trained_step is not None:
            try:
                step = trained_step() or step
            except Exception as exc:
                log.debug("strata: cannot read the trained step: %r", exc)
        for name, value in tfvalues.scalars(dict(logs or {})).items():
            sink.put(sanitize_name(f"eval/{name}"), value, step, wall)

    def train_end(self) -> None:
        self._in_fit = False
        self._epoch_boundary = False
        training_progress().end()
        # Training is over: a moment for the last epoch's deferred learning-rate read.
        self._resolver.stop(wait=STOP_WAIT if self._remote else 0.0)
        if self._health is not None:
            self._health.stop(final_poll=True)
            self._health = None


def _report_rate(
    sink: MetricSink, lr: Callable[[int], float | None], step: int, wall: float
) -> None:
    try:
        rate = lr(step)
    except Exception as exc:
        log.debug("strata: cannot read the learning rate: %r", exc)
        return
    if rate is not None:
        sink.put("lr", rate, step, wall)
