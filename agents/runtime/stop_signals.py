"""Which SIGTERM a task obeys while its agent gives notice before it stops.

Slurm (a requeue, a preemption) and systemd (`systemctl stop`) signal every process of the
agent's, its tasks too, not the agent alone. A parameter server or a worker that died at once
would leave the chief nothing to checkpoint with, so the notice would be for nothing. Where the
agent gives notice it names a stop file (STRATA_STOP_FILE) that it creates just before it stops
the attempt itself: a SIGTERM that comes while the file does not exist is someone else's, and the
task goes on until its agent has had the chief checkpoint and stops it. SIGKILL (Slurm's, after
KillWait) still ends it. Without the variable (no notice, or a script run by hand) nothing
changes.

Multi-worker mirrored workers are left alone: TensorFlow's save before preemption makes any
SIGTERM a backup at the next step, which is what the notice would have asked for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from agents.environment import TaskEnvironment

STOP_FILE_ENV = TaskEnvironment.variable("stop_file")


def from_its_agent() -> bool:
    """Whether a SIGTERM now is to be obeyed: its agent's own, or no agent holds others back."""
    path = os.environ.get(STOP_FILE_ENV)
    return not path or os.path.exists(path)


def say(line: str) -> None:
    # os.write, not print: a signal handler may interrupt a print in progress.
    with contextlib.suppress(OSError):
        os.write(sys.stderr.fileno(), f"strata: {line}\n".encode())


def held_back(name: str) -> str:
    return f"{name} goes on: a SIGTERM its agent did not send (the agent gives notice first)"


def hold_outside_sigterms(name: str) -> Callable[[], None] | None:
    """Until the returned function is called, SIGTERMs the agent did not send are held back
    (and said so); the agent's own gets the handler there was before (by default: the
    process ends). None, with nothing installed, where the agent gives no notice or off the
    main thread (only it may install handlers)."""
    if (
        not os.environ.get(STOP_FILE_ENV)
        or threading.current_thread() is not threading.main_thread()
    ):
        return None
    # None: a handler not installed from Python, which cannot be put back; the default is.
    previous: Any = signal.getsignal(signal.SIGTERM) or signal.SIG_DFL

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if not from_its_agent():
            say(held_back(name))
            return
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            os.kill(os.getpid(), signal.SIGTERM)  # as if no handler had been there

    signal.signal(signal.SIGTERM, on_sigterm)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, previous)

    return restore
