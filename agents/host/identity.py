"""The agent's state dir and its persistent identity: who this agent is, across restarts.

The identity is a random 128-bit token made on the first start and kept in the state dir.
The server lets one identity at a time use a host name: a second machine started under a
connected agent's name (a cloned image, two hosts with one hostname) is refused instead of
replacing it. The state dir is locked while the agent runs, so two agents on one machine
cannot share an identity by sharing a state dir.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
from pathlib import Path

from agents.protocol import IDENTITY_PATTERN

IDENTITY_FILE = "identity"
LOCK_FILE = "agent.lock"


class StateDirError(Exception):
    """The state dir cannot be used: unwritable, locked by another agent, or corrupt."""


def default_state_dir(name: str) -> Path:
    """Per user and per host name: `$XDG_STATE_HOME/strata/agent-<name>`
    (`~/.local/state/strata/agent-<name>` when XDG_STATE_HOME is not set)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
        raise StateDirError(f"{name!r} is not a host name an agent can use")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "strata" / f"agent-{name}"


def load_or_create_identity(state_dir: Path) -> str:
    """The identity kept in `state_dir`, made (once, atomically) if there is none yet."""
    path = state_dir / IDENTITY_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            return _read(path)
        made = secrets.token_hex(16)
        staged = state_dir / f".{IDENTITY_FILE}.{os.getpid()}"
        staged.write_text(made + "\n")
        try:
            # A link does not replace: of two agents starting at once, one identity wins.
            os.link(staged, path)
        except FileExistsError:
            pass
        finally:
            staged.unlink(missing_ok=True)
        return _read(path)
    except OSError as exc:
        raise StateDirError(f"cannot keep the agent's identity in {state_dir}: {exc}") from exc


def _read(path: Path) -> str:
    identity = path.read_text().strip()
    if not re.fullmatch(IDENTITY_PATTERN, identity):
        raise StateDirError(
            f"{path} does not hold an agent identity; delete it to make a new one "
            "(the server may then refuse this agent until `strata hosts forget` releases "
            "its name)"
        )
    return identity


class StateDirLock:
    """An exclusive lock on the state dir for as long as the agent runs (released by the
    kernel when the process exits, however it exits)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateDirError(f"cannot lock the state dir {self.state_dir}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateDirError(
                f"another agent is running with the state dir {self.state_dir}: give this one "
                "another --name (or --state-dir)"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
