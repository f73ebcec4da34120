"""The training process's copy of steps_per_execution (agents.runtime.step_reads).

A stand-in variable counts the reads that would cost a round trip to the ps (or a mirrored
read); a MirroredVariable is wrapped below, and the real tf_keras fit runs through the copy in
every end-to-end test that trains with runtime.callbacks().
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from agents.runtime.step_reads import keep_reads_local


class RemoteCounter:
    """A variable whose every numpy() is a round trip (counted)."""

    def __init__(self, value: int) -> None:
        self._value = value
        self.remote_reads = 0

    def numpy(self) -> np.ndarray:
        self.remote_reads += 1
        return np.asarray(self._value, dtype=np.int64)

    def assign(self, value: int) -> None:
        self._value = value

    def assign_add(self, delta: int) -> None:
        self._value += delta

    def assign_sub(self, delta: int) -> None:
        self._value -= delta


def ps_model(variable: object) -> SimpleNamespace:
    return SimpleNamespace(_steps_per_execution=variable)


def test_reads_between_writes_ask_the_ps_once() -> None:
    counter = RemoteCounter(1)
    assert keep_reads_local(ps_model(counter))
    assert [counter.numpy().item() for _ in range(100)] == [1] * 100
    assert counter.remote_reads == 1


def test_every_write_through_the_variable_is_read_back() -> None:
    counter = RemoteCounter(4)
    keep_reads_local(ps_model(counter))
    assert counter.numpy().item() == 4
    counter.assign(3)  # the data handler's last partial execution
    assert counter.numpy().item() == 3
    counter.assign_add(2)
    assert counter.numpy().item() == 5
    counter.assign_sub(4)
    assert counter.numpy().item() == 1
    assert counter.remote_reads == 4


def test_a_caller_changing_what_it_read_does_not_change_the_copy() -> None:
    counter = RemoteCounter(2)
    keep_reads_local(ps_model(counter))
    first = counter.numpy()
    first += 5
    assert counter.numpy().item() == 2


def test_a_second_fit_wraps_nothing_twice() -> None:
    counter = RemoteCounter(1)
    model = ps_model(counter)
    assert keep_reads_local(model)
    wrapped = counter.numpy
    assert keep_reads_local(model)
    assert counter.numpy is wrapped


@pytest.mark.slow  # imports TensorFlow
def test_a_mirrored_variable_reads_its_copy_and_rereads_after_a_write() -> None:
    import tensorflow as tf

    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        variable = tf.Variable(1, dtype=tf.int64)
    assert keep_reads_local(ps_model(variable))
    assert variable.numpy().item() == 1
    variable.assign(3)
    assert variable.numpy().item() == 3
    assert variable.read_value().numpy().item() == 3  # the variable itself, not the copy


def test_a_model_without_the_variable_or_its_methods_is_left_alone() -> None:
    assert not keep_reads_local(ps_model(None))
    assert not keep_reads_local(SimpleNamespace())
    assert not keep_reads_local(ps_model(SimpleNamespace(numpy=lambda: 1)))
