"""Warm start: a job's model begins from another job's checkpoint (the spec's
checkpoint.warm_start_from, STRATA_WARM_START_FROM), which may have been written under
another strategy: a checkpoint holds the model's and the optimizer's variables by their
place in the object graph, not by how they were distributed.

At the start of `fit`, and only when the task has no backup of its own (a restarted task
resumes from its backup instead, which BackupAndRestore restores right after), the runtime
reads ``tf.train.Checkpoint(model=model, optimizer=model.optimizer)`` from the path: a
checkpoint prefix (``.../ckpt-8``) or a checkpoint dir (its latest checkpoint). The model's
variables must all be found in it; the optimizer's are taken where they match (its slots are
restored as the optimizer creates them). A path that does not exist, holds no checkpoint or
does not fit the model stops the task for good (`agents.runtime.refusal`) with the reason:
no restart would find it otherwise. It happens once per process: a second `fit` goes on from
the weights it has.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from agents.runtime.backup import BACKUP_SUBDIR
from agents.runtime.cluster import local_cpu, task_environment

log = logging.getLogger("strata.runtime")

_done = threading.Event()  # this process warm-started (or resumed) once already


def has_backup(checkpoint_dir: str | None) -> bool:
    """Whether BackupAndRestore will resume this task (its dir holds a file of a backup)."""
    if checkpoint_dir is None:
        return False
    backup = os.path.join(checkpoint_dir, BACKUP_SUBDIR)
    return any(files for _, _, files in os.walk(backup))


def resolve_checkpoint(path: str) -> str:
    """The checkpoint prefix `path` names (a dir: its latest); ValueError saying why not."""
    import tensorflow as tf

    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"the dir {path} holds no checkpoint (no 'checkpoint' state file)")
        return str(latest)
    if not tf.io.gfile.exists(path + ".index"):
        raise ValueError(f"{path} is not a checkpoint: neither a dir nor a prefix of {path}.index")
    return path


def restore(model: Any, path: str) -> str:
    """Reads the model's weights and the optimizer's state from `path`; the prefix read.

    Raises with the reason when the path holds no checkpoint or one that does not fit."""
    import tensorflow as tf

    prefix = resolve_checkpoint(path)
    strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
    options = None
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        # The coordinator reads the files: the ps hosts need not see them.
        options = tf.train.CheckpointOptions(experimental_io_device=local_cpu(strategy))
    with strategy.scope():
        # Every variable the model has must be in the checkpoint (a checkpoint of another
        # model must not half-load); then the optimizer's state where it fits.
        tf.train.Checkpoint(model=model).read(
            prefix, options=options
        ).expect_partial().assert_existing_objects_matched()
        optimizer = getattr(model, "optimizer", None)
        both = tf.train.Checkpoint(model=model, optimizer=optimizer)
        both.read(prefix, options=options).expect_partial()
    return prefix


def warm_start(model: Any) -> str | None:
    """What the callback does at train begin: the prefix restored, or None when there was
    nothing to do (no warm start asked, a backup to resume from, done already)."""
    told = task_environment()
    path = told.warm_start_from
    if path is None or _done.is_set():
        return None
    _done.set()
    if has_backup(told.checkpoint_dir):
        print(
            f"strata: not warm-starting from {path}: resuming from this task's own backup",
            flush=True,
        )
        return None
    from agents.runtime.refusal import refuse

    try:
        prefix = restore(model, path)
    except Exception as exc:
        refuse(f"cannot warm-start from checkpoint.warm_start_from={path}: {exc}")
    print(f"strata: warm-started the model from {prefix}", flush=True)
    return prefix


def warm_start_callback() -> Any | None:
    """`StrataWarmStart` when the job asks for a warm start, else None."""
    if task_environment().warm_start_from is None:
        return None
    import tf_keras

    class StrataWarmStart(tf_keras.callbacks.Callback):  # type: ignore[misc]
        """Restores the checkpoint of checkpoint.warm_start_from at train begin (see
        `agents.runtime.warm_start`); before BackupAndRestore, which wins when it resumes."""

        def on_train_begin(self, logs: Any = None) -> None:
            warm_start(self.model)

    return StrataWarmStart()
