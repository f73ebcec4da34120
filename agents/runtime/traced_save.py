"""Checkpoint writes that trace their `tf.function` once, for ParameterServerStrategy.

Why: written eagerly, a checkpoint whose tensors live on more than one task (under parameter
servers the variables are on the ps tasks and the object graph on the coordinator) goes
through `MultiDeviceSaver.save`, which defines a new `tf.function` (``tf_function_save``) at
every call and so traces the whole save graph again at every save. From the fifth such save on,
TensorFlow logs "N out of the last N calls to ... tf_function_save triggered tf.function
retracing" into the chief's log, and each save pays for a trace.

`TracedWrite` writes a `tf.train.Checkpoint` through one `tf.function` of its own, with the
file prefix as a string tensor argument: the save graph is traced once, and traced again only
when what the checkpoint holds changes (a count of its trackable objects, checked before each
write, so that optimizer slots created later are not left out) or the I/O device does. Inside
a function TensorFlow builds the save ops directly, with no nested function. The values are read
when the function runs, so every write saves the current variables. Of the write options it
keeps the I/O device and runs the write callbacks (what a CheckpointManager needs); neither
the runtime nor tf_keras's backups use the others (async, sharding, skipping slots).

`trace_writes(checkpoint)` makes a checkpoint's own writes go through a `TracedWrite`: what a
`tf.train.CheckpointManager` saves (tf_keras's `BackupAndRestore`) then traces once too.

Imports TensorFlow when a writer is first used.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("strata.runtime")


class TracedWrite:
    """`checkpoint.write(prefix, options)` through one traced function (see the module)."""

    def __init__(self, checkpoint: Any, io_device: str | None = None) -> None:
        self._checkpoint = checkpoint
        self._io_device = io_device  # for writes whose options name none
        self._function: Any = None
        self._key: tuple[int, str | None] | None = None
        self._lock = threading.Lock()

    def __call__(self, file_prefix: str, options: Any = None) -> str:
        import tensorflow as tf

        prefix = os.fspath(file_prefix)
        callbacks = list(getattr(options, "experimental_write_callbacks", None) or [])
        io_device = getattr(options, "experimental_io_device", None) or self._io_device
        # A tensor prefix is not a dir TensorFlow creates for us, as it does for a string.
        tf.io.gfile.makedirs(os.path.dirname(prefix) or ".")
        with self._lock:
            key = (len(tf.train.TrackableView(self._checkpoint).descendants()), io_device)
            if self._function is None or key != self._key:
                self._function = self._trace(tf.train.CheckpointOptions(io_device))
                self._key = key
            function = self._function
            with tf.device("/cpu:0"):
                prefix_tensor = tf.constant(prefix, dtype=tf.string)
            function(prefix_tensor)
        for callback in callbacks:  # what Checkpoint.write does after writing
            if len(inspect.signature(callback).parameters) == 0:
                callback()
            else:
                callback(prefix)
        return prefix

    def _trace(self, options: Any) -> Any:
        import tensorflow as tf

        checkpoint = self._checkpoint
        # The class's _write, not the instance's: trace_writes may have replaced the latter.
        write = tf.train.Checkpoint._write

        def traced_write(prefix: Any) -> None:
            write(checkpoint, prefix, options=options)

        return tf.function(
            traced_write, input_signature=[tf.TensorSpec([], tf.string)], autograph=False
        )


def trace_writes(checkpoint: Any, io_device: str | None = None) -> None:
    """Routes the checkpoint's writes, also a CheckpointManager's, through a `TracedWrite`
    (whose I/O is on `io_device` when the write's options name none)."""
    if isinstance(getattr(checkpoint, "_write", None), _ReplacedWrite):
        return
    checkpoint._write = _ReplacedWrite(TracedWrite(checkpoint, io_device))


class _ReplacedWrite:
    """`Checkpoint._write(file_prefix, options=None)`, as CheckpointManager.save calls it."""

    def __init__(self, write: TracedWrite) -> None:
        self.write = write

    def __call__(self, file_prefix: Any, options: Any = None) -> str:
        return self.write(file_prefix, options)


def trace_backup_writes(model: Any, io_device: str | None = None) -> None:
    """The same for tf_keras's BackupAndRestore of `model`, once its on_train_begin has run
    (it leaves its `WorkerTrainingState` on the model); nothing for any other backup. Its
    writes name no I/O device: `io_device` (the coordinator's CPU) writes every file, where
    by default each ps would write its own shards (and fetch the file prefix from the
    coordinator, dialling it)."""
    state = getattr(model, "_training_state", None)
    manager = getattr(state, "write_checkpoint_manager", None)
    checkpoint = getattr(manager, "_checkpoint", None)
    if checkpoint is not None:
        trace_writes(checkpoint, io_device)


@contextlib.contextmanager
def reads_on(io_device: str) -> Iterator[None]:
    """For the block, a `tf.train.Checkpoint.restore` given no options reads its files on
    `io_device` (the coordinator's CPU), as the backup's resume in BackupAndRestore's
    on_train_begin does: else each ps reads its own shards, fetching the file prefix from
    the coordinator (dialling it), where the files may not even be."""
    import tensorflow as tf

    checkpoint_class = tf.train.Checkpoint
    original = checkpoint_class.restore
    options = tf.train.CheckpointOptions(experimental_io_device=io_device)

    def restore(self: Any, save_path: Any, options_given: Any = None) -> Any:
        return original(self, save_path, options=options_given or options)

    checkpoint_class.restore = restore
    try:
        yield
    finally:
        checkpoint_class.restore = original
