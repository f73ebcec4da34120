"""The commands a transaction decided, held until it has committed and then sent."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.protocol import ServerMessage, TaskKey


@dataclass
class CommandOutbox:
    """Commands decided inside a transaction, sent only once it has committed."""

    messages: list[tuple[str, ServerMessage]] = field(default_factory=list)
    # Which command (kind, attempt) each message is: noted as sent once it is, never for a
    # transaction that rolled back (its change applied again decides them again).
    commands: set[tuple[str, TaskKey]] = field(default_factory=set)

    def add(
        self, host: str, message: ServerMessage, *, command: tuple[str, TaskKey] | None = None
    ) -> None:
        self.messages.append((host, message))
        if command is not None:
            self.commands.add(command)

    def take(self, host: str) -> list[ServerMessage]:
        """Remove the messages for that host, for the caller to send itself (still counted
        as sent with the rest)."""
        taken = [m for h, m in self.messages if h == host]
        self.messages = [(h, m) for h, m in self.messages if h != host]
        return taken

    def hosts(self) -> set[str]:
        return {host for host, _ in self.messages}
