"""`StrataBackup`: the backup a restarted or resumed chief continues from, in
``<STRATA_CHECKPOINT_DIR>/backup``: the model's own Keras' `BackupAndRestore`, saved at
epoch ends by a time interval, and at a step when the job is interrupted on purpose.

Under tf_keras the backup records the epoch and the batch it was taken at. When fit knows
its steps per epoch the restore reads both (tf_keras's batch-level mode), so a backup taken
mid-epoch resumes at the next step; an epoch-end backup is recorded as the epoch's last
batch, so it resumes at the next epoch. Without known steps per epoch only the epoch counts:
a mid-epoch backup is recorded as the previous epoch's, so its epoch runs again from its
first step, from the backed-up weights. Keras 3's callback backs up at epoch ends only.

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

BACKUP_SUBDIR = "backup"  # BackupAndRestore's dir, inside the checkpoint dir
KERAS3_MID_EPOCH = (
    "Keras 3's BackupAndRestore backs up at epoch ends only: the job resumes from the last "
    "epoch's backup"
)


def is_ps(strategy: Any) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.ParameterServerStrategy)


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

        def _make_inner(self) -> Any:
            if keras_flavor(self.model) is KerasFlavor.keras3:
                import keras

                return keras.callbacks.BackupAndRestore(
                    backup_dir, save_freq="epoch", delete_checkpoint=not keep
                )
            # An int save_freq only selects the batch-level restore: the batch hooks that
            # would count it are never forwarded, so every save is one of ours.
            return tf_keras.callbacks.BackupAndRestore(
                backup_dir,
                save_freq=self.steps or "epoch",
                delete_checkpoint=not keep,
            )

        def on_train_begin(self, logs: Any = None) -> None:
            params = getattr(self, "params", None) or {}
            self.steps = params.get("steps") or None
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
            self.last_backup = clock()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.inner.on_epoch_begin(epoch, logs)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.unsaved_epoch = epoch
            if clock() - self.last_backup >= every_seconds:
                self._epoch_backup(epoch, logs)

        def on_train_end(self, logs: Any = None) -> None:
            if keep and self.unsaved_epoch is not None:
                self._epoch_backup(self.unsaved_epoch, logs)
            self.inner.on_train_end(logs)

        def _epoch_backup(self, epoch: int, logs: Any) -> None:
            if self.steps is not None and keras_flavor(self.model) is KerasFlavor.tf_keras:
                self._save_at(epoch, self.steps - 1)  # the epoch's last batch: the next one
            else:
                self.inner.on_epoch_end(epoch, logs)
            self.unsaved_epoch = None
            # From the end of the save: a slow save does not shorten the next interval.
            self.last_backup = clock()

        def back_up_now(self, epoch: int, batch: int) -> None:
            """Back up at this step boundary (training thread): the resumed job continues
            at the next step (or, with unknown steps per epoch, at this epoch's start)."""
            if self.inner is None:
                raise RuntimeError("no training in progress")
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
            state.back_up(epoch=epoch, batch=batch)
            if then_epoch is not None:  # training may go on: its epoch is still this one
                state._ckpt_saved_epoch.assign(then_epoch)

    return StrataBackup()
