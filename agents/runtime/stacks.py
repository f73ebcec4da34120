"""Python stacks on request: faulthandler registered for the signal the agent names
(STRATA_STACKS_SIGNAL), so that the agent can have a hung task write the stacks of all of its
threads to stderr, which is the task's log (agents.host.stacks). faulthandler's handler is C
code that writes at once, even while every thread is blocked in TensorFlow's kernels."""

from __future__ import annotations

import faulthandler
import sys

from agents.runtime.cluster import task_environment

__all__ = ["install"]


def install() -> bool:
    """Registers the handler where the agent asked for one; True when it is in place."""
    signum = task_environment().stacks_signal
    stderr = sys.__stderr__
    if signum is None or stderr is None:
        return False
    try:
        faulthandler.register(signum, file=stderr, all_threads=True, chain=False)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"strata: no stacks on request: {exc}", file=sys.stderr)
        return False
    return True
