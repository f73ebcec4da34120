"""Port claims: agents on one machine hold disjoint ports, never one something else listens on.

Real flocks on real lock files (in a test's own directory) and real sockets; each claimer is its
own open of the lock files, as two agent processes would be.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.host.ports import NoFreePorts, PortClaim, default_port_count


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket listening on a port the kernel chose (0.0.0.0, as a TensorFlow server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock


def test_two_claimers_in_one_range_get_disjoint_ports(
    tmp_path: Path, listener: socket.socket
) -> None:
    low = listener.getsockname()[1] + 1
    first = PortClaim.claim((low, low + 39), 8, tmp_path)
    second = PortClaim.claim((low, low + 39), 8, tmp_path)
    try:
        assert first.ports and second.ports
        assert not set(first.ports) & set(second.ports), (first.ports, second.ports)
        # Each advertises a block of consecutive ports inside the range.
        for claim in (first, second):
            start, end = claim.port_range
            assert claim.ports == list(range(start, end + 1))
            assert low <= start <= end <= low + 39
    finally:
        first.close()
        second.close()


def test_a_port_something_else_listens_on_is_skipped(
    tmp_path: Path, listener: socket.socket
) -> None:
    busy = listener.getsockname()[1]
    claim = PortClaim.claim((busy - 2, busy + 7), 10, tmp_path)
    try:
        assert claim.ports and busy not in claim.ports, claim.ports
        # The longest run of free ports around it: the 7 after it, not the 2 before.
        start, end = claim.port_range
        assert start > busy or end < busy
    finally:
        claim.close()


def test_close_releases_every_port(tmp_path: Path, listener: socket.socket) -> None:
    low = listener.getsockname()[1] + 1
    claim = PortClaim.claim((low, low + 9), 4, tmp_path)
    held = claim.ports
    for port in held:  # held: another agent's lock attempt fails
        assert not _lockable(tmp_path / str(port))
    claim.close()
    for port in held:
        assert _lockable(tmp_path / str(port))
    with pytest.raises(ValueError, match="released"):
        _ = claim.port_range


def test_fewer_free_than_wanted_claims_what_is_free_and_none_free_is_a_clear_error(
    tmp_path: Path, listener: socket.socket
) -> None:
    low = listener.getsockname()[1] + 1
    claims = [PortClaim.claim((low, low + 2), 100, tmp_path)]  # never more than the range
    try:
        assert len(claims[0].ports) <= 3
        with pytest.raises(NoFreePorts, match=f"no port in {low}-{low + 2} is free"):
            for _ in range(3):  # a run broken by a port in use elsewhere: the rest, claimed
                claims.append(PortClaim.claim((low, low + 2), 3, tmp_path))
        held = [port for claim in claims for port in claim.ports]
        assert len(held) == len(set(held)) and set(held) <= {low, low + 1, low + 2}
    finally:
        for claim in claims:
            claim.close()


def test_a_claim_needs_at_least_one_port_and_the_default_grows_with_the_gpus(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="at least one port"):
        PortClaim.claim((20000, 20009), 0, tmp_path)
    assert default_port_count(8) > default_port_count(0) > 0


def test_lock_files_are_readable_by_every_user(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port the kernel found free (the next one may not be)
        probe.bind(("0.0.0.0", 0))
        port = probe.getsockname()[1]
    old = os.umask(0o077)
    try:
        claim = PortClaim.claim((port, port), 1, tmp_path / "locks")
    finally:
        os.umask(old)
    try:
        assert claim.ports == [port]
        assert (tmp_path / "locks" / str(port)).stat().st_mode & 0o777 == 0o644
        assert (tmp_path / "locks").stat().st_mode & 0o7777 == 0o1777
    finally:
        claim.close()


def _lockable(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
