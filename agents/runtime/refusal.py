"""What a task says about its own end, through the file the agent names in
STRATA_TERMINATION_FILE (read when the process exits and sent with the exit):

* stopping for good (`refuse`): a failure that no restart can fix (a Keras the strategy cannot
  train, a warm-start checkpoint that does not exist). It exits with `EXIT_REFUSED`; the server
  fails the job with that reason instead of restarting it.
* stopping after it saved on a stop signal (`exit_interrupted`): under multi_worker_mirrored a
  SIGTERM to any worker, from Strata or from anywhere else, makes every worker back up at the
  same step and exit. The server resumes the job from that backup, counting no failure.

Run by hand (no such variable), the reason is only printed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import NoReturn

from agents.environment import TaskEnvironment

log = logging.getLogger("strata.runtime")

TERMINATION_ENV = TaskEnvironment.variable("termination_file")
EXIT_REFUSED = 78  # sysexits' EX_CONFIG: the job as configured cannot run
EXIT_INTERRUPTED = 42  # what TensorFlow's save before preemption exits with off GCP
MAX_REASON_CHARS = 2000


class TaskRefused(SystemExit):
    """Raised by `refuse`: ends the process with EXIT_REFUSED (Keras lets SystemExit through)."""

    def __init__(self, reason: str) -> None:
        super().__init__(EXIT_REFUSED)
        self.reason = reason


class ClientRefused(RuntimeError):
    """`refuse` in a client coordinator (runtime.connect): the process is the user's own (a
    notebook kernel), so it is told, not ended; the job's servers are untouched."""


def refuse(reason: str) -> NoReturn:
    """Ends this task with `reason`; the job fails with it and is not restarted. In a client
    coordinator it raises `ClientRefused` instead."""
    reason = reason[:MAX_REASON_CHARS]
    if os.environ.get(TaskEnvironment.variable("client_session")):
        raise ClientRefused(reason)
    print(f"strata: {reason}", file=sys.stderr, flush=True)
    _write_note({"reason": reason, "retry": False})
    raise TaskRefused(reason)


def exit_interrupted(reason: str) -> NoReturn:
    """Ends this task once it has saved on a stop signal; the job resumes from that save."""
    print(f"strata: {reason}", file=sys.stderr, flush=True)
    _write_note({"interrupted": reason[:MAX_REASON_CHARS]})
    raise SystemExit(EXIT_INTERRUPTED)


def _write_note(note: dict[str, object]) -> None:
    path = os.environ.get(TERMINATION_ENV)
    if path:
        try:
            with open(path, "w", encoding="utf-8") as out:
                json.dump(note, out)
        except OSError as exc:
            log.warning("strata: could not write the termination file %s: %r", path, exc)
