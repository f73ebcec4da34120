"""Checkpoint writes through one traced function (agents.runtime.traced_save).

In one process TensorFlow never retraces an eager save (that takes tensors on several tasks:
the parameter-server case, checked end to end in tests/e2e/test_training_surface.py); here the
writer's own contract: every write saves the current values, the function is traced once, and
again only when the checkpoint holds more, and a CheckpointManager's saves go through it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.runtime.traced_save import TracedWrite, trace_writes

pytestmark = pytest.mark.slow  # imports TensorFlow


def test_each_write_saves_the_current_values_with_one_trace(tmp_path: Path) -> None:
    import tensorflow as tf

    weight = tf.Variable([1.0, 2.0])
    checkpoint = tf.train.Checkpoint(weight=weight)
    write = TracedWrite(checkpoint)
    for value in (3.0, 4.0, 5.0):
        weight.assign([value, value])
        assert write(str(tmp_path / f"ckpt-{int(value)}")) == str(tmp_path / f"ckpt-{int(value)}")
    assert write._function.experimental_get_tracing_count() == 1
    for value in (3.0, 4.0, 5.0):
        reader = tf.train.load_checkpoint(str(tmp_path / f"ckpt-{int(value)}"))
        assert list(reader.get_tensor("weight/.ATTRIBUTES/VARIABLE_VALUE")) == [value, value]

    # Something new in the checkpoint (as optimizer slots appear): traced again, and saved.
    checkpoint.bias = tf.Variable(7.0)
    write(str(tmp_path / "ckpt-6"))
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt-6"))
    assert reader.get_tensor("bias/.ATTRIBUTES/VARIABLE_VALUE") == 7.0
    restored = tf.train.Checkpoint(weight=tf.Variable([0.0, 0.0]), bias=tf.Variable(0.0))
    restored.read(str(tmp_path / "ckpt-6")).assert_consumed()
    assert float(restored.bias.numpy()) == 7.0


def test_a_checkpoint_manager_saves_through_it(tmp_path: Path) -> None:
    import tensorflow as tf

    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(step=step)
    trace_writes(checkpoint)
    trace_writes(checkpoint)  # idempotent
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path / "backup"), max_to_keep=2)
    for value in range(1, 5):
        step.assign(value)
        manager.save()
    # The manager's bookkeeping ran after each write: state file, and only the last two kept.
    assert manager.checkpoints == [str(tmp_path / "backup" / f"ckpt-{n}") for n in (3, 4)]
    assert tf.train.latest_checkpoint(str(tmp_path / "backup")).endswith("ckpt-4")
    assert not os.path.exists(tmp_path / "backup" / "ckpt-1.index")
    assert checkpoint._write.write._function.experimental_get_tracing_count() == 1

    fresh = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64))
    restoring = tf.train.CheckpointManager(fresh, str(tmp_path / "backup"), max_to_keep=2)
    restoring.restore_or_initialize()
    assert int(fresh.step.numpy()) == 4
    assert int(fresh.save_counter.numpy()) == 4
