"""A sweep's and a trial's statuses."""

from __future__ import annotations

from enum import StrEnum


class SweepStatus(StrEnum):
    running = "running"  # trials are asked for and run until the budget is spent
    stopping = "stopping"  # stopped by request or its wall time: running trials are cancelled
    succeeded = "succeeded"  # every trial of the budget ended
    stopped = "stopped"  # ended early, by request or its wall time, with what it found
    failed = "failed"  # more trials failed than the budget allows

    @property
    def is_terminal(self) -> bool:
        return self in {SweepStatus.succeeded, SweepStatus.stopped, SweepStatus.failed}


class TrialStatus(StrEnum):
    running = "running"  # its job is unfinished (pending, placed or training)
    succeeded = "succeeded"  # its job succeeded: its objective is the metric's last value
    pruned = "pruned"  # stopped early by the pruner; its job was cancelled
    failed = "failed"  # its job failed, was cancelled by someone, or never reported the metric
    stopped = "stopped"  # cancelled because the sweep stopped

    @property
    def is_terminal(self) -> bool:
        return self is not TrialStatus.running
