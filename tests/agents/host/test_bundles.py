"""The agent's code bundle cache: unsafe bundles are refused with their reason, a bundle is
fetched once and checked against its digest, and the cache evicts the least recently used
bundle that no attempt runs in."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from agents.host.bundles import BundleCache, BundleError, unpack
from agents.host.launcher import LaunchError


def tar_of(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ([file("/etc/x")], "has an absolute path"),
        ([file("../x")], "has a '..' part"),
        ([file("a/../../x")], "has a '..' part"),
        ([link("l", "/etc/passwd")], "a link to the absolute path '/etc/passwd'"),
        ([link("d/l", "../../x")], "which leaves the bundle"),
        ([link("h", "../x", tarfile.LNKTYPE)], "which leaves the bundle"),
        ([link("d", "."), file("d/x")], "is under the link d"),
        ([special("dev", tarfile.CHRTYPE)], "is a device file or fifo"),
        ([special("blk", tarfile.BLKTYPE)], "is a device file or fifo"),
        ([special("fifo", tarfile.FIFOTYPE)], "is a device file or fifo"),
        ([file("big", b"y" * 101)], "over the agent's limit of 100 per member"),
    ],
)
def test_an_unsafe_bundle_is_refused_with_its_reason(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], reason: str
) -> None:
    bundle = tmp_path / "b.tar"
    bundle.write_bytes(tar_of(*members))
    with pytest.raises(BundleError, match=reason.replace("(", r"\(")) as refused:
        unpack(bundle, tmp_path / "out", max_member_bytes=100)
    assert isinstance(refused.value, LaunchError)  # fails the task through the launch path
    assert not (tmp_path / "out").exists()


def test_a_safe_bundle_unpacks_with_its_links(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar"
    bundle.write_bytes(tar_of(file("pkg/a.py", b"A = 1\n"), link("pkg/b.py", "a.py")))
    assert unpack(bundle, tmp_path / "out") == 6
    assert (tmp_path / "out" / "pkg" / "b.py").read_text() == "A = 1\n"


class Server:
    """Stands in for GET /code/{sha256}: counts fetches, can serve other bytes."""

    def __init__(self) -> None:
        self.bundles: dict[str, bytes] = {}
        self.fetched: list[str] = []
        self.lie = False

    def add(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.bundles[sha] = data
        return sha

    async def fetch(self, sha256: str, into: Path) -> None:
        self.fetched.append(sha256)
        into.write_bytes(self.bundles[sha256] + (b"tampered" if self.lie else b""))


async def test_a_bundle_is_fetched_once_even_for_attempts_starting_together(
    tmp_path: Path,
) -> None:
    server = Server()
    sha = server.add(tar_of(file("train.py", b"print(1)\n")))
    cache = BundleCache(tmp_path / "cache", server.fetch)
    roots = await asyncio.gather(cache.acquire(sha), cache.acquire(sha))
    assert roots[0] == roots[1] == tmp_path / "cache" / sha
    assert (roots[0] / "train.py").read_text() == "print(1)\n"
    assert server.fetched == [sha]
    # Another agent process finds it unpacked.
    again = BundleCache(tmp_path / "cache", server.fetch)
    await again.acquire(sha)
    assert server.fetched == [sha]


async def test_a_bundle_that_is_not_its_digest_is_refused_and_not_kept(tmp_path: Path) -> None:
    server = Server()
    sha = server.add(tar_of(file("train.py")))
    server.lie = True
    cache = BundleCache(tmp_path / "cache", server.fetch)
    with pytest.raises(BundleError, match="has the SHA-256"):
        await cache.acquire(sha)
    assert list((tmp_path / "cache").iterdir()) == []


async def test_the_least_recently_used_idle_bundle_is_evicted_never_one_in_use(
    tmp_path: Path,
) -> None:
    server = Server()
    one, two = (server.add(tar_of(file("f", bytes([n]) * 60))) for n in range(2))
    cache = BundleCache(tmp_path / "cache", server.fetch, max_bytes=100)
    await cache.acquire(one)  # in use throughout
    await cache.acquire(two)
    # Over the bound, but both are in use: nothing goes.
    assert cache.cached() == sorted([one, two])
    cache.release(two)  # now idle and over the bound: evicted, one stays
    assert cache.cached() == [one]
    cache.release(one)
    assert cache.cached() == [one]  # within the bound


async def test_eviction_takes_the_least_recently_used_first(tmp_path: Path) -> None:
    server = Server()
    one, two, three = (server.add(tar_of(file("f", bytes([n]) * 60))) for n in range(3))
    cache = BundleCache(tmp_path / "cache", server.fetch, max_bytes=130)
    for sha in (one, two, one):  # two is now the least recently used
        await cache.acquire(sha)
        cache.release(sha)
        await asyncio.sleep(0.01)
    await cache.acquire(three)
    assert cache.cached() == sorted([one, three])
    assert not (tmp_path / "cache" / two).exists()
    assert server.fetched == [one, two, three]
