"""Checkpoints of a training job: the `StrataCheckpoints` callback, its policy and retention.

A checkpoint is `tf.train.Checkpoint(model=model, optimizer=model.optimizer)` written with
`Checkpoint.write` to ``<STRATA_CHECKPOINT_DIR>/ckpt-<N>`` (the files ``ckpt-<N>.index`` and
``ckpt-<N>.data-*``), exactly the structure `tf_keras.utils.SidecarEvaluator` restores. The
dir's ``checkpoint`` state file lists the kept checkpoints (relative names, oldest first), so
`tf.train.latest_checkpoint` and `tf.train.checkpoints_iterator` see them. N is unique and
increasing: a restarted chief numbers on from the highest N in the dir. A small manifest,
``strata-checkpoints.json``, remembers each kept checkpoint's step, epoch and metrics, so that
"keep the best" still knows the old ones after a restart.

When (the policy comes from STRATA_CHECKPOINT_POLICY, JSON; see `parse_policy`):

* every `every_epochs` epochs, at the epoch end (trigger "epoch");
* every `every_seconds`, checked at train batch ends (trigger "time"): under
  ParameterServerStrategy training is asynchronous and an epoch can be long;
* on a "checkpoint" command from the server (trigger "command"): the sender thread only
  queues the command id; the save happens on the training thread at the next train batch
  end (or epoch end), a step boundary. A command while no `fit` runs is answered with
  ``command_failed`` ("no training in progress"): the training thread is the only one
  that may safely touch the model;
* on an "interrupt" command (trigger "interruption"): the same, after a backup at that step
  (`backup.py`) for the resumed job to continue from; training then holds for the command's
  `hold_seconds`, for the server to stop the task with nothing lost;
* at train end, when steps ran since the last save and the policy saves on its own
  (trigger "end").

After each save the chief reports a `CheckpointSaved` (size, the optimizer's step read back
from the files, epochs completed, the latest epoch-end metrics) and applies the retention
policy: the latest `keep` and, with `keep_best`, the best one by an epoch-end metric. Only a
checkpoint written right at an epoch end (no step since) can be "best": a mid-epoch one
carries the previous epoch's metrics, which do not describe its weights.

Who writes: under parameter_server only the chief (the coordinator) runs `fit`; it reads the
variables from the ps tasks and writes every file itself (the I/O device is its CPU), while
workers go on training. Under mirrored the single task writes. Under multi_worker_mirrored
every worker must take part in a save (it may need collectives), so all of them save at the
same epoch ends: the chief (worker 0 without a chief task) writes to the real dir and
reports, the others write to a temporary dir and delete it, as tf_keras's own callbacks do.
Since all workers must agree on when, time-based saves and checkpoint-now are not available
there (the first is ignored with a warning, the second answered with command_failed).

A failed save logs a warning (and answers the command it served with command_failed);
training goes on. The batch hook costs an increment, a flag check and a clock compare.

This module imports no TensorFlow: TensorFlow and tf_keras are imported when a
callback is built or used (`StrataCheckpoints` is built on attribute access).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agents.environment import TaskEnvironment
from agents.runtime import values as tfvalues
from agents.runtime.backup import backup_and_restore
from agents.runtime.checkpoint_policy import (
    Candidate,
    CheckpointPolicy,
    checkpoints_to_keep,
    parse_policy,
)
from agents.runtime.cluster import local_cpu, task_environment
from agents.runtime.flavor import keras_flavor
from agents.runtime.progress import training_progress
from agents.runtime.values import sanitize_name

if TYPE_CHECKING:
    from agents.protocol import CheckpointSaved, Command
    from agents.runtime.sink import MetricSink

log = logging.getLogger("strata.runtime")

DIR_ENV = TaskEnvironment.variable("checkpoint_dir")
MANIFEST = "strata-checkpoints.json"
MAX_METRICS = 200
NOT_TRAINING = "no training in progress"
MWM_REFUSAL = (
    "checkpoint-now is not available under multi_worker_mirrored: every worker must save at "
    "the same step, so checkpoints are taken at epoch ends only"
)

Trigger = Literal["epoch", "time", "command", "interruption", "end"]
Kind = Literal["single", "parameter_server", "multi_worker_mirrored"]

_NUMBERED = re.compile(r"^ckpt-(\d+)(?:\D|$)")  # ckpt-7.index, ckpt-7.data-*, ckpt-7_temp
_NAME = re.compile(r"^ckpt-(\d+)$")
_ITERATION_KEYS = (
    "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",  # tf_keras optimizers
    "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",  # legacy optimizers
)


# --- where ---------------------------------------------------------------------------------


def checkpoint_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The job's checkpoint dir (STRATA_CHECKPOINT_DIR), or None outside Strata."""
    return task_environment(env).checkpoint_dir


# --- checkpoint-now: commands from the sender thread -----------------------------------------


class _CommandRouter:
    """The one command hook per sink: hands "checkpoint" commands to the keeper whose `fit`
    is running (the latest started), or answers command_failed."""

    def __init__(self, sink: MetricSink) -> None:
        self.sink = sink
        self._lock = threading.Lock()
        self._active: list[CheckpointKeeper] = []

    def activate(self, keeper: CheckpointKeeper) -> None:
        with self._lock:
            if keeper not in self._active:
                self._active.append(keeper)

    def deactivate(self, keeper: CheckpointKeeper) -> None:
        with self._lock:
            if keeper in self._active:
                self._active.remove(keeper)

    def __call__(self, command: Command) -> None:
        if command.action not in ("checkpoint", "interrupt"):
            return
        with self._lock:
            active = list(reversed(self._active))
        reason = NOT_TRAINING
        for keeper in active:
            refusal = keeper.request(command)
            if refusal is None:
                return
            reason = refusal
            if refusal != NOT_TRAINING:
                break
        log.warning("strata: checkpoint command %d refused: %s", command.id, reason)
        self.sink.report_command_failed(command.id, reason)


_routers: dict[int, _CommandRouter] = {}
_routers_lock = threading.Lock()


def _router(sink: MetricSink) -> _CommandRouter:
    with _routers_lock:
        router = _routers.get(id(sink))
        if router is None or router.sink is not sink:
            router = _CommandRouter(sink)
            _routers[id(sink)] = router
            sink.on_command(router)
        return router


# --- the keeper: everything the callback does --------------------------------------------------


@dataclass
class _Record:
    name: str
    number: int
    step: int | None = None
    epoch: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    fresh: bool = False  # written at an epoch end: its metrics describe its weights


class CheckpointKeeper:
    """The callback's logic. The training thread calls the hooks; `request()` (a command)
    may come from any thread."""

    def __init__(
        self, directory: str, policy: CheckpointPolicy, sink: MetricSink | None = None
    ) -> None:
        if sink is None:
            from agents.runtime.process_sink import get_sender

            sink = get_sender()
        self.directory = directory
        self.policy = policy
        self.sink = sink
        self.clock: Callable[[], float] = time.monotonic
        # Read without a lock on the hot path; written under `_lock`.
        self.command_waiting = False
        self.due = math.inf  # monotonic time of the next time-based save
        self.batches = 0  # train batch ends seen by this callback
        self._lock = threading.Lock()
        self._commands: deque[Command] = deque()
        # Backs up at a step boundary (epoch, batch; None at an epoch end) before an
        # interruption's checkpoint: set by `checkpoint_callbacks` to StrataBackup's.
        self.before_interruption: Callable[[int, int | None], None] = _no_backup
        self._active = False
        self._router = _router(sink)
        self._kind: Kind = "single"
        self._chief = True
        self._every_seconds: float | None = None
        self._warned_time = False
        self._model: Any = None
        self._checkpoint: Any = None
        self._options: Any = None
        self._known: dict[str, _Record] = {}  # kept checkpoints in the dir, oldest first
        self._next_number = 1
        self._scanned = False  # the dir's checkpoints are known (numbering goes on from them)
        self._saved_batches = 0
        self._epoch_end_batches = -1
        self._epochs_done: int | None = None
        self._metrics: dict[str, float] = {}

    # --- hooks (training thread) ---------------------------------------------------------

    def train_begin(self, model: Any) -> None:
        import tensorflow as tf

        strategy = model.distribute_strategy
        kind: Kind = "single"
        if isinstance(strategy, tf.distribute.ParameterServerStrategy):
            kind = "parameter_server"  # only the coordinator runs fit: it saves
        elif isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            kind = "multi_worker_mirrored"
        chief = kind != "multi_worker_mirrored" or bool(strategy.extended.should_checkpoint)
        self.configure(kind, chief)
        self._model = model
        self._checkpoint = None
        self._saved_batches = self.batches
        self._epoch_end_batches = -1
        self._epochs_done = None
        self._metrics = {}
        self.activate()  # from here on a command is queued (a failed save answers it)
        self._options = None
        if kind == "parameter_server":
            # Every file from the coordinator: the ps hosts need not see the dir.
            self._options = tf.train.CheckpointOptions(experimental_io_device=local_cpu(strategy))
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        if kind == "parameter_server":
            # Saved eagerly, each write would trace its save graph anew (and log retracing
            # warnings): ours and the backups' go through one traced function each instead.
            from agents.runtime.traced_save import trace_backup_writes, trace_writes

            trace_writes(self._checkpoint)
            trace_backup_writes(model, local_cpu(strategy))
        self._scanned = False
        if self._chief:
            self._scan_dir()

    def configure(self, kind: Kind, chief: bool) -> None:
        """Sets who this task is in the save (tests call it directly)."""
        self._kind = kind
        self._chief = chief
        every = self.policy.every_seconds
        if every is not None and kind == "multi_worker_mirrored":
            if not self._warned_time:
                self._warned_time = True
                log.warning(
                    "strata: every_seconds=%s is ignored under multi_worker_mirrored (all "
                    "workers must save at the same step); checkpoints follow epochs only",
                    every,
                )
            every = None
        self._every_seconds = every
        self._reset_timer()

    def activate(self) -> None:
        with self._lock:
            self._active = True
        self._router.activate(self)

    def epoch_begin(self, epoch: int) -> None:
        self._epochs_done = epoch

    def step_boundary(self, batch: int) -> None:
        """A train batch ended with a command waiting or a time-based save due."""
        command = self._next_command()
        if command is not None:
            self._serve(command, self._epochs_done or 0, batch)
        elif self.clock() >= self.due:
            self._save("time")

    def epoch_end(self, epoch: int, logs: Mapping[str, Any] | None) -> None:
        self._epochs_done = epoch + 1
        self._epoch_end_batches = self.batches
        numbers = tfvalues.scalars(dict(logs or {}))
        self._metrics = {
            sanitize_name(name): value for name, value in list(numbers.items())[:MAX_METRICS]
        }
        every = self.policy.every_epochs
        command = self._next_command()
        if command is not None:
            self._serve(command, epoch, None)  # it stands for the epoch's save too
        elif every is not None and (epoch + 1) % every == 0:
            self._save("epoch")

    def train_end(self) -> None:
        with self._lock:
            self._active = False
            pending = list(self._commands)
            self._commands.clear()
            self.command_waiting = False
        self._router.deactivate(self)
        for command in pending:
            if command.action == "interrupt":  # nothing left to resume: the job is ending
                self.sink.report_command_failed(command.id, "training has ended")
            else:
                self._save("command", command.id)
        if self.policy.saves and self.batches != self._saved_batches:
            self._save("end")
        self.due = math.inf

    # --- commands (any thread) -------------------------------------------------------------

    def request(self, command: Command) -> str | None:
        """Queues a command for the next step boundary; a reason when it cannot be."""
        with self._lock:
            if not self._active:
                return NOT_TRAINING
            if self._kind == "multi_worker_mirrored":
                return MWM_REFUSAL
            self._commands.append(command)
            self.command_waiting = True
        return None

    def _next_command(self) -> Command | None:
        if not self.command_waiting:
            return None
        with self._lock:
            command = self._commands.popleft() if self._commands else None
            self.command_waiting = bool(self._commands)
        return command

    def _serve(self, command: Command, epoch: int, batch: int | None) -> None:
        if command.action != "interrupt":
            self._save("command", command.id)
            return
        # The backup first: the checkpoint's report answers the command, and the server may
        # then stop this process at once.
        try:
            self.before_interruption(epoch, batch)
        except Exception as exc:
            log.warning("strata: the interruption's backup failed: %r", exc)
            self.sink.report_command_failed(command.id, f"no backup to resume from: {exc}"[:4096])
            return
        if self._save("interruption", command.id):
            log.info("strata: interrupted; training holds for %gs", command.hold_seconds)
            hold_training(command.hold_seconds)

    # --- saving ----------------------------------------------------------------------------

    def _reset_timer(self) -> None:
        every = self._every_seconds
        self.due = self.clock() + every if every is not None else math.inf

    def _save(self, trigger: Trigger, command_id: int | None = None) -> bool:
        self._reset_timer()
        try:
            with training_progress().busy("checkpointing"):
                saved = self._write(trigger, command_id)
        except Exception as exc:
            log.warning("strata: %s checkpoint failed; training goes on: %r", trigger, exc)
            if command_id is not None:
                self.sink.report_command_failed(
                    command_id, f"the checkpoint could not be written: {exc!r}"[:4096]
                )
            return False
        self._saved_batches = self.batches
        if saved is not None:
            log.info("strata: wrote %s (%s, step %d)", saved.name, trigger, saved.step)
            self.sink.report_checkpoint(saved)
        return True

    def _write(self, trigger: Trigger, command_id: int | None) -> CheckpointSaved | None:
        import tensorflow as tf

        from agents.protocol import CheckpointSaved

        if self._checkpoint is None:
            raise RuntimeError("no model: the callback has not seen on_train_begin")
        if not self._chief:
            # A multi_worker_mirrored worker other than the chief: take part, then discard.
            temp = os.path.join(self.directory, f"workertemp_{_task_label()}")
            try:
                self._checkpoint.write(os.path.join(temp, "ckpt"), options=self._options)
            finally:
                if tf.io.gfile.exists(temp):
                    tf.io.gfile.rmtree(temp)
            return None

        if not self._scanned:
            self._scan_dir()
        number = self._next_number
        self._next_number += 1
        name = f"ckpt-{number}"
        prefix = os.path.join(self.directory, name)
        tf.io.gfile.makedirs(self.directory)
        self._checkpoint.write(prefix, options=self._options)
        wall_time = time.time()
        size = sum(tf.io.gfile.stat(path).length for path in tf.io.gfile.glob(prefix + ".*"))
        step = _written_step(prefix, self._model)
        record = _Record(
            name=name,
            number=number,
            step=step,
            epoch=self._epochs_done,
            metrics=dict(self._metrics),
            fresh=self.batches == self._epoch_end_batches,
        )
        self._known[name] = record
        best = self.policy.keep_best
        kept = checkpoints_to_keep(
            [
                Candidate(r.name, r.number, r.metrics.get(best.metric) if r.fresh else None)
                if best is not None
                else Candidate(r.name, r.number)
                for r in self._known.values()
            ],
            self.policy.keep,
            best.mode if best is not None else None,
        )
        # The state file first, so it never lists a deleted checkpoint; then the files.
        _update_state(self.directory, name, kept)
        deleted = []
        for old in [n for n in self._known if n not in kept]:
            try:
                for path in tf.io.gfile.glob(os.path.join(self.directory, old) + ".*"):
                    tf.io.gfile.remove(path)
            except Exception as exc:
                log.warning("strata: could not delete checkpoint %s: %r", old, exc)
                continue
            del self._known[old]
            deleted.append(old)
        _write_manifest(self.directory, self._known.values())
        return CheckpointSaved(
            name=name,
            step=step,
            epoch=self._epochs_done,
            size_bytes=size,
            wall_time=wall_time,
            trigger=trigger,
            command_id=command_id,
            metrics=record.metrics,
            deleted=deleted,
            keras=keras_flavor(self._model).value,
        )

    # --- the dir -----------------------------------------------------------------------------

    def _scan_dir(self) -> None:
        """Learns the checkpoints already in the dir (a restarted chief numbers on)."""
        numbers, indexed = _numbered_in(self.directory)
        numbers += [r.number for r in self._known.values()]
        manifest = _read_manifest(self.directory)
        known: dict[str, _Record] = {}
        for name, number in sorted(indexed.items(), key=lambda item: item[1]):
            known[name] = self._known.get(name) or _record_from(name, number, manifest.get(name))
        self._known = known
        self._next_number = max(self._next_number, max(numbers, default=0) + 1)
        self._scanned = True


def _written_step(prefix: str, model: Any) -> int:
    """The optimizer's iteration count as written (under PS training goes on meanwhile)."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        for key in _ITERATION_KEYS:
            if reader.has_tensor(key):
                return max(0, int(reader.get_tensor(key)))
    except Exception as exc:
        log.debug("strata: cannot read the step from %s: %r", prefix, exc)
    value = tfvalues.to_float(getattr(model.optimizer, "iterations", None))
    return max(0, int(value)) if value is not None else 0


def _numbered_in(directory: str) -> tuple[list[int], dict[str, int]]:
    """Every checkpoint number the dir's files and state name, and the checkpoints whose
    index file is there, by name."""
    import tensorflow as tf

    tf.io.gfile.makedirs(directory)
    numbers: list[int] = []
    indexed: dict[str, int] = {}
    for entry in tf.io.gfile.listdir(directory):
        entry = entry.rstrip("/")
        match = _NUMBERED.match(entry)
        if match is None:
            continue
        numbers.append(int(match.group(1)))
        if entry == f"ckpt-{match.group(1)}.index":
            indexed[entry[: -len(".index")]] = int(match.group(1))
    state = tf.train.get_checkpoint_state(directory)
    if state is not None:
        for path in state.all_model_checkpoint_paths:
            match = _NAME.match(os.path.basename(path))
            if match is not None:
                numbers.append(int(match.group(1)))
    return numbers, indexed


def _read_manifest(directory: str) -> dict[str, Any]:
    import tensorflow as tf

    path = os.path.join(directory, MANIFEST)
    try:
        if not tf.io.gfile.exists(path):
            return {}
        with tf.io.gfile.GFile(path, "r") as handle:
            data = json.loads(handle.read())
        entries = data.get("checkpoints") if isinstance(data, dict) else None
        return entries if isinstance(entries, dict) else {}
    except Exception as exc:
        log.warning("strata: ignoring an unreadable %s: %r", path, exc)
        return {}


def _write_manifest(directory: str, records: Iterable[_Record]) -> None:
    import tensorflow as tf

    data = {
        "checkpoints": {
            r.name: {"step": r.step, "epoch": r.epoch, "metrics": r.metrics, "fresh": r.fresh}
            for r in records
        }
    }
    path = os.path.join(directory, MANIFEST)
    temp = f"{path}.tmp"
    try:
        with tf.io.gfile.GFile(temp, "w") as handle:
            handle.write(json.dumps(data, allow_nan=True))
        tf.io.gfile.rename(temp, path, overwrite=True)
    except Exception as exc:
        log.warning("strata: could not write %s: %r", path, exc)


def _record_from(name: str, number: int, entry: object) -> _Record:
    record = _Record(name=name, number=number)
    if isinstance(entry, dict):
        step, epoch, metrics = entry.get("step"), entry.get("epoch"), entry.get("metrics")
        record.step = step if isinstance(step, int) else None
        record.epoch = epoch if isinstance(epoch, int) else None
        if isinstance(metrics, dict):
            record.metrics = tfvalues.scalars(metrics)
        record.fresh = entry.get("fresh") is True
    return record


def _update_state(directory: str, latest: str, kept: Sequence[str]) -> None:
    """Rewrites the dir's ``checkpoint`` file (atomically), with names relative to the dir."""
    try:
        from tensorflow.python.checkpoint import checkpoint_management

        update = checkpoint_management.update_checkpoint_state_internal
    except (ImportError, AttributeError):  # another TF layout: the public, deprecated one
        import tensorflow as tf

        tf.compat.v1.train.update_checkpoint_state(directory, latest, list(kept))
        return
    update(directory, latest, list(kept), save_relative_paths=True)


def _task_label() -> str:
    task = task_environment().task
    return f"{task.role}_{task.index}" if task is not None else str(os.getpid())


# --- the callbacks ---------------------------------------------------------------------------


def _make_class() -> type:
    import tf_keras as keras

    class StrataCheckpoints(keras.callbacks.Callback):  # type: ignore[misc]
        """Writes, reports and prunes the job's checkpoints (see `agents.runtime.checkpoints`)."""

        def __init__(
            self,
            directory: str,
            policy: CheckpointPolicy | None = None,
            *,
            sink: MetricSink | None = None,
        ) -> None:
            super().__init__()
            # Batch hooks get the raw logs and never look at them: under PS they are
            # RemoteValues, and converting one would wait for its step to run.
            self._supports_tf_logs = True
            self.keeper = CheckpointKeeper(directory, policy or CheckpointPolicy(), sink)

        def _guard(self, hook: str, call: Callable[[], None]) -> None:
            try:
                call()
            except Exception as exc:  # checkpoints must never break training
                log.warning("strata: checkpoints: %s failed: %r", hook, exc)

        def on_train_begin(self, logs: Any = None) -> None:
            self._guard("on_train_begin", lambda: self.keeper.train_begin(self.model))

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.keeper.epoch_begin(epoch)

        # The hot path: an increment, a flag and a clock compare.
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            keeper = self.keeper
            keeper.batches += 1
            if keeper.command_waiting or keeper.clock() >= keeper.due:
                self._guard("on_train_batch_end", lambda: keeper.step_boundary(batch))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._guard("on_epoch_end", lambda: self.keeper.epoch_end(epoch, logs))

        def on_train_end(self, logs: Any = None) -> None:
            self._guard("on_train_end", self.keeper.train_end)

    return StrataCheckpoints


_class: type | None = None
_class_lock = threading.Lock()


def strata_checkpoints_class() -> type:
    """The `StrataCheckpoints` class (a tf_keras Callback), built on first use."""
    global _class
    with _class_lock:
        if _class is None:
            _class = _make_class()
        return _class


def hold_training(seconds: float) -> None:
    """Wait on the training thread for the server to stop this task after an interruption."""
    time.sleep(seconds)


def _no_backup(epoch: int, batch: int | None) -> None:
    raise RuntimeError("no BackupAndRestore beside the checkpoints (runtime.callbacks() has both)")


def checkpoint_callbacks(sink: MetricSink | None = None) -> tuple[Any, Any] | None:
    """(BackupAndRestore, StrataCheckpoints) for the job's checkpoint dir and policy; None
    when STRATA_CHECKPOINT_DIR is not set (a script run by hand)."""
    directory = checkpoint_dir()
    if directory is None:
        return None
    policy = parse_policy(task_environment().checkpoint_policy)
    backup = backup_and_restore(directory, policy.backup_every_seconds)
    checkpoints = strata_checkpoints_class()(directory, policy, sink=sink)
    checkpoints.keeper.before_interruption = backup.back_up_now
    return backup, checkpoints


def __getattr__(name: str) -> Any:
    if name == "StrataCheckpoints":
        return strata_checkpoints_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
