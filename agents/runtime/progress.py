"""Where training is, for the server's progress, step rate and hang detection.

The training thread only stores a few attributes here (at train and epoch begin, around
checkpoint writes, evaluation and export); the sender thread reads a `Progress` snapshot now
and then and sends it when it changed. The step itself is read through a callable at snapshot
time, so the per-batch hot path does no extra work.

`busy` names what may hold the step still without a hang: the first step of a fit (tracing
and compiling its function; it ends once the step moves), an evaluation, a checkpoint or
backup write, an export. Phases nest (a checkpoint written while evaluating); the innermost
is reported. Once fit returns, the last step is reported with `training` false: what the
script does next (a final save, an export, its own evaluation) is not watched for hangs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the protocol (pydantic) is imported on the first snapshot, not with this
    from agents.protocol import BusyPhase, Progress

__all__ = ["TrainingProgress", "training_progress"]


class TrainingProgress:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._step: Callable[[], int] | None = None
        self._first_step = 0
        self._total: int | None = None
        self._epochs: int | None = None
        self._epoch: int | None = None
        self._phases: list[BusyPhase] = []
        self._training = False
        self._tracing = False  # the fit's first step has not run yet

    def begin(self, step: Callable[[], int], *, steps: int | None, epochs: int | None) -> None:
        """A fit begins: `step()` reads the trained step from now on."""
        with self._lock:
            self._step = step
            self._first_step = _read(step)
            self._epochs = epochs if epochs and epochs > 0 else None
            self._total = steps * self._epochs if steps and self._epochs else None
            self._epoch = None
            self._phases = []
            self._training = True
            self._tracing = True

    def epoch_begin(self, epoch: int) -> None:
        with self._lock:
            self._epoch = epoch
            if self._step is not None and self._tracing:
                # A resumed fit's first epoch starts past 0: its first step is still to come.
                self._first_step = _read(self._step)

    def end(self) -> None:
        """The fit returned: its last step is reported as not training."""
        with self._lock:
            self._training = False
            self._phases = []

    @contextlib.contextmanager
    def busy(self, phase: BusyPhase) -> Iterator[None]:
        self.enter(phase)
        try:
            yield
        finally:
            self.leave(phase)

    def enter(self, phase: BusyPhase) -> None:
        with self._lock:
            self._phases.append(phase)

    def leave(self, phase: BusyPhase) -> None:
        with self._lock:
            if phase in self._phases:
                # The innermost of that phase: phases left out of order stay balanced.
                del self._phases[len(self._phases) - 1 - self._phases[::-1].index(phase)]

    def snapshot(self) -> Progress | None:
        """The report to send now; None before the first fit."""
        from agents.protocol import Progress

        with self._lock:
            step_of = self._step
            if step_of is None or self._epoch is None:
                return None  # before fit's first epoch begins, the step is not known yet
            phases = list(self._phases)
            first, total, epochs, epoch = self._first_step, self._total, self._epochs, self._epoch
            training = self._training
        step = _read(step_of)
        busy: BusyPhase | None = phases[-1] if phases else None
        if step > first:
            self._tracing = False
        elif busy is None and training and self._tracing:
            busy = "tracing"  # the fit's first step: its function is being traced and compiled
        return Progress(
            step=step, total_steps=total, epoch=epoch, epochs=epochs, busy=busy, training=training
        )


def _read(step: Callable[[], int]) -> int:
    try:
        return max(0, int(step()))
    except Exception:
        return 0


_progress = TrainingProgress()


def training_progress() -> TrainingProgress:
    """The process's one progress (a training process runs one fit at a time)."""
    return _progress
