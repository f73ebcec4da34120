"""The process's one metric sink, which `runtime.report()`, the Keras callbacks, checkpoints and
exports report through: the server's sender (agents.runtime.sender) with TensorBoard event
files beside it where the task has a directory for them, or a `NullSender` outside Strata.
"""

from __future__ import annotations

import os
import threading

from agents.runtime import event_files, sender
from agents.runtime.sink import MetricSink, NullSender

__all__ = ["get_sender", "set_sender"]

_instance: MetricSink | None = None
_instance_lock = threading.Lock()


def get_sender() -> MetricSink:
    """The process's sink, created from the environment on first use."""
    global _instance
    sink = _instance
    if sink is None:
        with _instance_lock:
            if _instance is None:
                # The points go to TensorBoard event files too, where the task has a dir.
                _instance = event_files.with_event_files(sender.from_env())
            sink = _instance
    return sink


def set_sender(sink: MetricSink | None) -> MetricSink | None:
    """Replaces the process's sink (None: the next use builds one from the environment).

    Returns the previous one, which is not closed.
    """
    global _instance
    with _instance_lock:
        previous, _instance = _instance, sink
    return previous


def _after_fork_in_child() -> None:
    # A forked child (a multiprocessing data loader) has no sender thread, and would number
    # its points from the parent's sequence: it reports nothing.
    global _instance, _instance_lock
    _instance_lock = threading.Lock()
    _instance = NullSender()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
