"""Where the runtime's metric points go: the `MetricSink` protocol, and the sink that reports
nothing (a script run by hand, outside Strata, and a forked child of a task).

The sinks themselves: `agents.runtime.sender.MetricSender` (the server), `agents.runtime.
event_files.EventFileSink` (TensorBoard event files beside another sink); the process's own is
`agents.runtime.process_sink.get_sender()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from agents.protocol import CheckpointSaved, Command

__all__ = ["EXIT_FLUSH_TIMEOUT", "CommandHook", "MetricSink", "NullSender"]

EXIT_FLUSH_TIMEOUT = 5.0

CommandHook = Callable[[Command], None]


class MetricSink(Protocol):
    """Where the runtime's metric points go: the server, nowhere, or a test's recorder."""

    @property
    def enabled(self) -> bool: ...

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Queues one point; never blocks and never raises."""
        ...

    def flush(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
        """Waits until every point queued so far is stored; False when the timeout passed."""
        ...

    def close(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> None: ...

    def on_command(self, hook: CommandHook) -> None: ...

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        """Queues a checkpoint report; it is resent until the server has stored it."""
        ...

    def report_command_failed(self, command_id: int, reason: str) -> None: ...


class NullSender:
    """Reports nothing: a script run by hand, outside Strata."""

    enabled = False
    dropped = 0

    def put(self, name: str, value: float, step: int, wall_time: float | None = None) -> None:
        return None

    def flush(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
        return True

    def close(self, timeout: float = EXIT_FLUSH_TIMEOUT) -> None:
        return None

    def on_command(self, hook: CommandHook) -> None:
        return None

    def report_checkpoint(self, saved: CheckpointSaved) -> None:
        return None

    def report_command_failed(self, command_id: int, reason: str) -> None:
        return None
