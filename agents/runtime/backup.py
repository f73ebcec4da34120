"""`StrataBackup`: the backup a restarted or resumed chief continues from, in
``<STRATA_CHECKPOINT_DIR>/backup``: the model's own Keras' `BackupAndRestore`, saved at
epoch ends by a time interval, and at a step when the job is interrupted on purpose.

Under tf_keras the backup records the epoch and the batch it was taken at. When fit knows
its steps per epoch the restore reads both (tf_keras's batch-level mode), so a backup taken
mid-epoch resumes at the next step; an epoch-end backup is recorded as the epoch's last
batch, so it resumes at the next epoch. Without known steps per epoch only the epoch counts:
a mid-epoch backup is recorded as the previous epoch's, so its epoch runs again from its
first step, from the backed-up weights. Keras 3's callback backs up at epoch ends only.

Under multi_worker_mirrored (tf_keras, known steps per epoch) the callback also turns on
TensorFlow's save before preemption: a worker sent SIGTERM (the agent stopping it for an
interruption, or Slurm) has every worker back up at the next step, then exits, and the
resumed job goes on at the step after it. Only then does the callback do more per step than
count it for TensorFlow's handler.

This module imports no TensorFlow until a callback is built.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from agents.runtime.cluster import local_cpu, task_environment
from agents.runtime.flavor import KerasFlavor, keras_flavor
from agents.runtime.progress import training_progress

BACKUP_SUBDIR = "backup"  # BackupAndRestore's dir, inside the checkpoint dir
# An int save_freq selects tf_keras's batch-level restore; one this large never saves by count.
BATCH_LEVEL = 2**62
KERAS3_MID_EPOCH = (
    "Keras 3's BackupAndRestore backs up at epoch ends only: the job resumes from the last "
    "epoch's backup"
)


def is_ps(strategy: Any) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.ParameterServerStrategy)


def is_mwm(strategy: Any) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def preemption_under_way(model: Any) -> bool:
    """Whether TensorFlow's PreemptionCheckpointHandler on the model may save at this step: a
    SIGTERM here, a peer's step to save at, or the grace period after a save (tf 2.21's
    private flags; True where one cannot be read, so the batch is then always assigned)."""
    handler: Any = getattr(model, "_preemption_handler", None)
    try:
        return bool(
            handler._received_own_sigterm.is_set()
            or handler._received_checkpoint_step.is_set()
            or handler._final_checkpoint_countdown
        )
    except AttributeError:
        return True


def backup_and_restore(
    directory: str, every_seconds: float, clock: Callable[[], float] = time.monotonic
) -> Any:
    """A `StrataBackup` writing to ``<directory>/backup``.

    It backs up at an epoch end once `every_seconds` have passed since the last backup or
    the start of training (0: at every epoch end), so that short epochs do not pay for a
    backup each; and on `back_up_now(epoch, batch)` (an interruption). Which Keras is known
    only when `fit` hands the callback its model, and whether the steps per epoch are known
    only at `on_train_begin`, so the real callback is made then.

    In a client coordinator (runtime.connect) the backup outlives `fit`, its last epoch
    backed up at the end whatever the interval: the next client (a restarted kernel) resumes
    from it rather than from the first epoch.
    """
    import tf_keras

    backup_dir = os.path.join(directory, BACKUP_SUBDIR)
    keep = task_environment().client_session is not None

    class StrataBackup(tf_keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.inner: Any = None
            self.last_backup = clock()
            self.unsaved_epoch: int | None = None  # the last epoch, if not backed up
            self.steps: int | None = None  # per epoch, when fit knows them
            self._supports_tf_logs = True  # it never reads the batch logs
            self.preempting = False  # TensorFlow's save before preemption is on

        def _make_inner(self) -> Any:
            if keras_flavor(self.model) is KerasFlavor.keras3:
                import keras

                return keras.callbacks.BackupAndRestore(
                    backup_dir, save_freq="epoch", delete_checkpoint=not keep
                )
            return tf_keras.callbacks.BackupAndRestore(
                backup_dir,
                save_freq=BATCH_LEVEL if self.steps else "epoch",
                delete_checkpoint=not keep,
                save_before_preemption=self.preempting,
            )

        def _saves_before_preemption(self) -> bool:
            params = getattr(self, "params", None) or {}
            return (
                bool(params.get("steps"))
                and keras_flavor(self.model) is KerasFlavor.tf_keras
                and is_mwm(getattr(self.model, "distribute_strategy", None))
            )

        # Called by CallbackList once the model and params are set: batch hooks only where
        # the save before preemption needs them (every step checks for a SIGTERM).
        def _implements_train_batch_hooks(self) -> bool:
            return self._saves_before_preemption()

        # Other callbacks' batch hooks have this called too: it acts only when preempting.
        # The inner callback's batch-begin hook is never called: it assigns the batch to a
        # mirrored variable at every step (~0.13 ms of CPU), which only a save before
        # preemption reads, so that is assigned here, and only while one is under way.
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self.preempting:
                if preemption_under_way(self.model):
                    self.model._training_state._ckpt_saved_batch.assign(batch)
                self.inner.on_train_batch_end(batch, logs)  # counts the step, saves if due

        def on_train_begin(self, logs: Any = None) -> None:
            params = getattr(self, "params", None) or {}
            self.steps = params.get("steps") or None
            self.preempting = self._saves_before_preemption()
            self.inner = self._make_inner()
            self.inner.set_model(self.model)
            if params:
                self.inner.set_params(params)
            strategy = getattr(self.model, "distribute_strategy", None)
            with contextlib.ExitStack() as reads:
                if keras_flavor(self.model) is not KerasFlavor.keras3 and is_ps(strategy):
                    from agents.runtime.traced_save import reads_on

                    reads.enter_context(reads_on(local_cpu(strategy)))
                self.inner.on_train_begin(logs)
            if self.preempting:
                self._watch_for_preemption()
            self.last_backup = clock()

        def _watch_for_preemption(self) -> None:
            """TensorFlow's PreemptionCheckpointHandler over the backup, as tf_keras builds
            it on GCP only: off it, save_before_preemption is ignored. It catches SIGTERM,
            agrees on a step with the other workers and backs up there, then exits (42),
            telling the agent it was interrupted rather than failed."""
            import tensorflow as tf

            from agents.runtime.refusal import exit_interrupted

            def saved_and_stopping() -> None:
                exit_interrupted(
                    "was told to stop and backed up with the other workers at the same step"
                )

            state = self.model._training_state
            handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                self.model.distribute_strategy.cluster_resolver,
                state.write_checkpoint_manager,
                termination_config=tf.distribute.experimental.TerminationConfig(
                    exit_fn=saved_and_stopping
                ),
            )
            handler._read_checkpoint_manager = state.read_checkpoint_manager
            state.preemption_handler = self.model._preemption_handler = handler
            state._enable_save_before_preemption = True

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.inner.on_epoch_begin(epoch, logs)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.unsaved_epoch = epoch
            if clock() - self.last_backup >= every_seconds:
                self._epoch_backup(epoch, logs)

        def on_train_end(self, logs: Any = None) -> None:
            if keep and self.unsaved_epoch is not None:
                self._epoch_backup(self.unsaved_epoch, logs)
            handler = getattr(self.model, "_preemption_handler", None)
            self.inner.on_train_end(logs)
            if self.preempting and handler is not None:
                # Its watcher threads would outlive fit, one of them blocked on the cluster.
                handler._stop_cluster_wise_termination_watcher_thread()
                handler._stop_poll_termination_signal_thread()

        def _epoch_backup(self, epoch: int, logs: Any) -> None:
            if self.steps is not None and keras_flavor(self.model) is KerasFlavor.tf_keras:
                self._save_at(epoch, self.steps - 1)  # the epoch's last batch: the next one
            else:
                with training_progress().busy("checkpointing"):
                    self.inner.on_epoch_end(epoch, logs)
            self.unsaved_epoch = None
            # From the end of the save: a slow save does not shorten the next interval.
            self.last_backup = clock()

        def back_up_now(self, epoch: int, batch: int | None) -> None:
            """Back up at this step boundary (training thread): the resumed job continues
            at the next step (or, with unknown steps per epoch, at this epoch's start).
            `batch` None: at the end of `epoch`."""
            if self.inner is None:
                raise RuntimeError("no training in progress")
            if batch is None:
                self._epoch_backup(epoch, None)
                return
            if keras_flavor(self.model) is KerasFlavor.keras3:
                raise RuntimeError(KERAS3_MID_EPOCH)
            if self.steps is not None:
                self._save_at(epoch, batch)
            else:
                self._save_at(epoch - 1, -1, then_epoch=epoch)
            self.last_backup = clock()

        def _save_at(self, epoch: int, batch: int, then_epoch: int | None = None) -> None:
            state = self.model._training_state
            state._ckpt_saved_epoch.assign(epoch)
            state._ckpt_saved_batch.assign(batch)
            with training_progress().busy("checkpointing"):
                state.back_up(epoch=epoch, batch=batch)
            if then_epoch is not None:  # training may go on: its epoch is still this one
                state._ckpt_saved_epoch.assign(then_epoch)

    return StrataBackup()
