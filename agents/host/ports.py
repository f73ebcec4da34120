"""The ports an agent hands out, claimed machine-wide so that no two agents share one.

Several agents may run on one machine (Slurm jobs sharing a node, agents started by hand) with
overlapping `--port-range`s, and the server knows ports per host record only. So at start an
agent claims a block of consecutive ports inside its range: for each port, an exclusive flock
on a lock file in a machine-wide directory, held for the agent's life (the kernel drops it when
the process dies, however it dies), plus a bind test proving nothing else listens there. The
agent advertises only that block as its port range, which keeps the protocol and the server's
host records as they are.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

# /run/lock is world-writable (sticky) on Linux; where it is missing, the temp dir stands in.
_SYSTEM_LOCKS = Path("/run/lock")
LOCK_DIR_NAME = "strata-ports"
# Ports beyond one per GPU: chiefs, parameter servers, evaluators and CPU-only jobs.
CPU_TASK_PORTS = 16


class NoFreePorts(RuntimeError):
    """Not one port of the range could be claimed on this machine."""


def default_lock_dir() -> Path:
    base = _SYSTEM_LOCKS if _SYSTEM_LOCKS.is_dir() else Path(tempfile.gettempdir())
    return base / LOCK_DIR_NAME


def default_port_count(gpus: int) -> int:
    """Enough for two tasks per GPU plus the CPU-only ones a host typically runs."""
    return 2 * gpus + CPU_TASK_PORTS


def _open_lock_dir(directory: Path) -> Path:
    """The lock directory, made shareable by every user (sticky, like /tmp) if this agent
    creates it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):  # another user's: theirs to set up
            if directory.stat().st_uid == os.geteuid():
                directory.chmod(0o1777)
    except OSError as exc:
        raise NoFreePorts(f"cannot use the port lock directory {directory}: {exc}") from None
    return directory


def _bindable(port: int) -> bool:
    """Whether a server could bind this port now (TensorFlow's binds 0.0.0.0:port). With
    SO_REUSEADDR, as servers bind: a connection left in TIME_WAIT does not count, a listener
    does."""
    families = [(socket.AF_INET, "0.0.0.0")]  # noqa: S104 (a probe, closed at once)
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, address in families:
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no such family on this host: nothing can listen there either
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    continue  # IPv6 compiled in but not configured
                return False
    return True


def _lock(directory: Path, port: int) -> int | None:
    """A descriptor holding this port's lock, or None if another agent holds it (or its lock
    file cannot be opened). Read-only, so agents of other users share the same files."""
    path = directory / str(port)
    # Opened as it is when it exists: the kernel refuses O_CREAT on another user's file in a
    # sticky world-writable directory (fs.protected_regular), even when it exists.
    for flags in (os.O_RDONLY, os.O_RDONLY | os.O_CREAT | os.O_EXCL, os.O_RDONLY):
        try:
            fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
        except (FileNotFoundError, FileExistsError):
            continue  # made or removed meanwhile: the next way opens it
        except OSError:
            return None
        if flags & os.O_CREAT:
            os.fchmod(fd, 0o644)  # readable by every user, whatever this one's umask
        break
    else:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class PortClaim:
    """A block of consecutive ports held by this process until close() (or its exit)."""

    def __init__(self, held: dict[int, int], directory: Path) -> None:
        self._held = held  # port -> the descriptor holding its lock
        self.directory = directory

    @classmethod
    def claim(
        cls, port_range: tuple[int, int], count: int, directory: Path | None = None
    ) -> PortClaim:
        """The first `count` consecutive ports of the range that are free on this machine,
        or the longest run of free ones if there is no such block (logged). Raises NoFreePorts
        when none is free."""
        if count < 1:
            raise ValueError(f"an agent needs at least one port, not {count}")
        low, high = port_range
        wanted = min(count, high - low + 1)
        where = _open_lock_dir(directory or default_lock_dir())
        best: dict[int, int] = {}
        run: dict[int, int] = {}
        for port in range(low, high + 1):
            fd = _lock(where, port)
            if fd is not None and not _bindable(port):
                os.close(fd)
                fd = None
            if fd is not None:
                run[port] = fd
                if len(run) == wanted:
                    break
                continue
            best, run = _longer(best, run), {}
        best = _longer(best, run)
        if not best:
            raise NoFreePorts(
                f"no port in {low}-{high} is free on this machine: each is in use or claimed "
                f"by another strata agent (locks under {where}); give a --port-range with "
                "free ports"
            )
        claim = cls(best, where)
        if len(best) < wanted:
            log.warning(
                "only %d of the %d ports wanted are free together in %d-%d: claimed %d-%d",
                len(best),
                wanted,
                low,
                high,
                *claim.port_range,
            )
        return claim

    @property
    def port_range(self) -> tuple[int, int]:
        """The claimed block, inclusive."""
        if not self._held:
            raise ValueError("this port claim was released")
        return min(self._held), max(self._held)

    @property
    def ports(self) -> list[int]:
        return sorted(self._held)

    def close(self) -> None:
        """Release every port (closing the descriptors drops their locks)."""
        for fd in self._held.values():
            os.close(fd)
        self._held = {}


def _longer(best: dict[int, int], run: dict[int, int]) -> dict[int, int]:
    """The longer of two runs of held ports; the other's locks are released."""
    keep, drop = (run, best) if len(run) > len(best) else (best, run)
    for fd in drop.values():
        os.close(fd)
    return keep
