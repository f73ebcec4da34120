"""Who this server replica is, across restarts, and the locks that keep one process per
identity and one server per SQLite file.

The replica id is made once and kept in the data dir, so that a restarted server takes its
own unexpired lease back at once instead of waiting for it to expire. Two processes sharing a
data dir would share the id, and both would pass the lease's checks: the data dir is locked
while a server runs. The locks are flocks on a descriptor the server holds, released when it
closes them at shutdown or by the kernel when the process ends, however it ends; each open
of the file is its own lock, so two apps in one process refuse each other too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
from pathlib import Path

from sqlalchemy.engine import make_url

REPLICA_FILE = "replica-id"
REPLICA_LOCK = "replica.lock"
REPLICA_PATTERN = r"[0-9a-f]{16}"


class ServerRefused(Exception):
    """This server must not start: another holds what it needs (its message says what)."""


class HeldLock:
    """An exclusive flock on `path`, held until `release`."""

    def __init__(self, path: Path, refusal: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ServerRefused(refusal) from None
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


def lock_replica(data_dir: Path) -> HeldLock:
    return HeldLock(
        data_dir / REPLICA_LOCK,
        f"another server runs with the data dir {data_dir} ({data_dir / REPLICA_LOCK} is "
        "locked): each server replica needs a data dir of its own",
    )


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL; None for PostgreSQL or a database in memory."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser().resolve()


def lock_sqlite(database: Path) -> HeldLock:
    """One server per SQLite file: its leadership is that no other server runs on it."""
    path = database.with_name(database.name + ".server-lock")
    return HeldLock(
        path,
        f"another server runs on the SQLite database {database} ({path} is locked): SQLite "
        "is a database for one server; run several servers on PostgreSQL",
    )


def load_or_create_replica_id(data_dir: Path) -> str:
    """The replica id kept in `data_dir`, made (once, atomically) if there is none yet."""
    path = data_dir / REPLICA_FILE
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    staged = data_dir / f".{REPLICA_FILE}.{os.getpid()}"
    staged.write_text(secrets.token_hex(8) + "\n")
    try:
        os.link(staged, path)  # a link never replaces: of two made at once, one wins
    except FileExistsError:
        pass
    finally:
        staged.unlink(missing_ok=True)
    return _read(path)


def _read(path: Path) -> str:
    replica = path.read_text().strip()
    if not re.fullmatch(REPLICA_PATTERN, replica):
        raise ServerRefused(f"{path} does not hold a replica id; delete it to make a new one")
    return replica
