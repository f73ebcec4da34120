"""The agent's code bundles: fetched once from the server, checked, unpacked safely into a
cache under the workspace, and kept while any attempt runs in them.

A bundle is unpacked into `<cache>/<sha256>/` (under a temporary name first, renamed when
whole), after every member has been checked: no absolute path, no `..`, no link that leaves the
bundle or a member written through a link, no device file or fifo, no member over the size
limit. Any of these fails the task that asked, with the reason, before anything starts (a
BundleError is a LaunchError). The cache keeps at most `max_bytes` of unpacked bundles, evicting
the least recently used that no attempt runs in; bundles in use are never evicted, even when
they alone are over the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import tarfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath

import httpx

from agents.host.launcher import LaunchError
from agents.tls import client_ssl

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 4 << 30
DEFAULT_MEMBER_BYTES = 1 << 30
CHUNK = 1 << 20

Fetch = Callable[[str, Path], Awaitable[None]]


class BundleError(LaunchError):
    """A code bundle that cannot be used: not fetched, not what its digest says, or unsafe."""


def check_members(archive: tarfile.TarFile, max_member_bytes: int) -> int:
    """Refuse an archive with any unsafe member; answer the bytes its files unpack to."""
    links: set[str] = set()
    total = 0
    for member in archive.getmembers():
        name = member.name
        path = PurePosixPath(name)
        if name.startswith("/") or path.is_absolute():
            raise BundleError(f"code bundle member {name!r} has an absolute path")
        if ".." in path.parts:
            raise BundleError(f"code bundle member {name!r} has a '..' part")
        for parent in path.parents:
            if str(parent) in links:
                raise BundleError(f"code bundle member {name!r} is under the link {parent}")
        if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
            raise BundleError(f"code bundle member {name!r} is a device file or fifo")
        if member.issym() or member.islnk():
            target = member.linkname
            if target.startswith("/"):
                raise BundleError(
                    f"code bundle member {name!r} is a link to the absolute path {target!r}"
                )
            base = path.parent if member.issym() else PurePosixPath()
            depth = 0
            for part in (base / target).parts:
                depth += -1 if part == ".." else 0 if part == "." else 1
                if depth < 0:
                    raise BundleError(
                        f"code bundle member {name!r} is a link to {target!r}, "
                        "which leaves the bundle"
                    )
            links.add(name)
        elif member.isfile():
            if member.size > max_member_bytes:
                raise BundleError(
                    f"code bundle member {name!r} is {member.size} bytes, over the agent's "
                    f"limit of {max_member_bytes} per member"
                )
            total += member.size
        elif not member.isdir():
            raise BundleError(f"code bundle member {name!r} is of a type that is not taken")
    return total


def unpack(tar_path: Path, dest: Path, max_member_bytes: int = DEFAULT_MEMBER_BYTES) -> int:
    """Check and unpack the bundle at `tar_path` into the new dir `dest`; answer its size."""
    try:
        with tarfile.open(tar_path) as archive:
            size = check_members(archive, max_member_bytes)
            dest.mkdir(parents=True)
            # tarfile's own data filter too, for anything the checks above did not think of.
            archive.extractall(dest, filter="data")
    except tarfile.TarError as exc:
        raise BundleError(f"code bundle is not a readable tar: {exc}") from None
    except tarfile.FilterError as exc:  # pragma: no cover - check_members refuses these first
        raise BundleError(f"code bundle member refused: {exc}") from None
    return size


def http_fetcher(server_url: str, token: str, ca_file: str | None = None) -> Fetch:
    """Fetch GET /code/{sha256} with the agent's token into a file."""
    verify = client_ssl(server_url, ca_file) or True

    async def fetch(sha256: str, into: Path) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(
            base_url=server_url, headers=headers, verify=verify, timeout=60.0
        ) as client:
            try:
                async with client.stream("GET", f"/code/{sha256}") as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise BundleError(
                            f"cannot fetch code bundle {sha256}: the server answered "
                            f"{response.status_code} {response.text[:200]}"
                        )
                    with into.open("wb") as out:
                        async for chunk in response.aiter_bytes(CHUNK):
                            out.write(chunk)
            except httpx.HTTPError as exc:
                raise BundleError(f"cannot fetch code bundle {sha256}: {exc}") from None

    return fetch


class BundleCache:
    def __init__(
        self,
        root: Path,
        fetch: Fetch,
        max_bytes: int = DEFAULT_CACHE_BYTES,
        max_member_bytes: int = DEFAULT_MEMBER_BYTES,
    ) -> None:
        self.root = root
        self.fetch = fetch
        self.max_bytes = max_bytes
        self.max_member_bytes = max_member_bytes
        self.fetches = 0
        self._sizes: dict[str, int] = {}
        self._used: dict[str, float] = {}  # last use, for LRU
        self._in_use: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._load()

    def _load(self) -> None:
        """Bundles unpacked by an earlier run of the agent (whole: they were renamed in)."""
        if not self.root.is_dir():
            return
        for entry in self.root.iterdir():
            if entry.name.startswith("."):
                shutil.rmtree(entry, ignore_errors=True)  # a half-done unpack or fetch
                continue
            if entry.is_dir():
                size = sum(
                    p.stat().st_size for p in entry.rglob("*") if p.is_file() and not p.is_symlink()
                )
                self._sizes[entry.name] = size
                self._used[entry.name] = entry.stat().st_mtime

    def path(self, sha256: str) -> Path:
        return self.root / sha256

    def cached(self) -> list[str]:
        return sorted(self._sizes)

    async def acquire(self, sha256: str) -> Path:
        """The unpacked bundle, fetched and unpacked first if need be; held until release."""
        lock = self._locks.setdefault(sha256, asyncio.Lock())
        async with lock:
            if sha256 not in self._sizes:
                self._sizes[sha256] = await self._fetch_and_unpack(sha256)
            self._in_use[sha256] = self._in_use.get(sha256, 0) + 1
            self._used[sha256] = time.time()
        self._evict()
        return self.path(sha256)

    def release(self, sha256: str) -> None:
        self._used[sha256] = time.time()  # in use until now
        left = self._in_use.get(sha256, 0) - 1
        if left > 0:
            self._in_use[sha256] = left
        else:
            self._in_use.pop(sha256, None)
        self._evict()

    async def _fetch_and_unpack(self, sha256: str) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        tar_path = self.root / f".{sha256}.tar"
        staging = self.root / f".{sha256}.unpacking"
        try:
            await self.fetch(sha256, tar_path)
            self.fetches += 1
            actual = await asyncio.to_thread(_sha256_of, tar_path)
            if actual != sha256:
                raise BundleError(
                    f"code bundle {sha256} fetched from the server has the SHA-256 {actual}"
                )
            shutil.rmtree(staging, ignore_errors=True)
            size = await asyncio.to_thread(unpack, tar_path, staging, self.max_member_bytes)
            os.replace(staging, self.path(sha256))
            log.info("code bundle %s unpacked (%d bytes)", sha256, size)
            return size
        finally:
            with contextlib.suppress(FileNotFoundError):
                tar_path.unlink()
            shutil.rmtree(staging, ignore_errors=True)

    def _evict(self) -> None:
        total = sum(self._sizes.values())
        for sha256 in sorted(self._sizes, key=lambda s: self._used.get(s, 0.0)):
            if total <= self.max_bytes:
                return
            if sha256 in self._in_use:
                continue
            total -= self._sizes.pop(sha256)
            self._used.pop(sha256, None)
            shutil.rmtree(self.path(sha256), ignore_errors=True)
            log.info("code bundle %s evicted from the cache", sha256)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
