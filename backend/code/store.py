"""Code bundles on disk: `<data dir>/code/<sha256>.tar`, nothing in the database.

A bundle is named by the SHA-256 of its bytes, so the file's name is all there is to know
about it (its size is the file's): a table would only repeat the directory, and could
disagree with it. An upload is written under a temporary name in the same directory while
it is hashed, and renamed into place only when it is whole and its hash is the name it was
sent under, so a reader never sees half a bundle and a failed upload leaves nothing.

What a bundle holds (its manifest: members, sizes, kinds) is read from the tar once, before
the rename, and kept beside it as `<sha256>.manifest.json`: like the bundle it never changes,
it is derived from the bundle alone, and it lives and goes with the bundle's file, so a file
rather than a table keeps the store's one source of truth (the directory) and needs no
migration. The manifest is written before the bundle is renamed into place; a bundle found
without one (stored before manifests were kept, or by a server that died between the two
renames) has it read again on first request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import ClientDisconnect

from backend.code.manifest import NotATar, read_manifest
from backend.code.schemas import CodeManifest
from backend.errors import DomainError, NotFound, PayloadTooLarge

log = logging.getLogger(__name__)

DIGEST = re.compile(r"[0-9a-f]{64}")


class BadBundle(DomainError):
    """An upload that cannot be stored: a bad digest, a hash mismatch, a truncated body."""

    status_code = 400


@dataclass(frozen=True)
class Stored:
    sha256: str
    size: int
    created: bool


def check_digest(sha256: str) -> str:
    if not DIGEST.fullmatch(sha256):
        raise BadBundle(
            f"code bundle digest {sha256[:80]!r} is not a SHA-256: "
            "expected 64 lowercase hex characters"
        )
    return sha256


class CodeStore:
    """The bundles of one server, under `root`."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.uploads = 0  # bundles stored since start: a resubmitted bundle adds none

    def path(self, sha256: str) -> Path:
        return self.root / f"{check_digest(sha256)}.tar"

    def manifest_path(self, sha256: str) -> Path:
        return self.root / f"{check_digest(sha256)}.manifest.json"

    def size(self, sha256: str) -> int | None:
        """The stored bundle's size in bytes, None when there is none."""
        try:
            return self.path(sha256).stat().st_size
        except FileNotFoundError:
            return None

    async def receive(
        self, sha256: str, chunks: AsyncIterator[bytes], declared: int | None
    ) -> Stored:
        """Store the body `chunks` as bundle `sha256`, checking its hash and its length;
        idempotent: the same bytes again change nothing."""
        final = self.path(sha256)
        if declared is not None and declared > self.max_bytes:
            raise PayloadTooLarge(
                f"code bundle is {declared} bytes; the limit is {self.max_bytes} "
                "(STRATA_MAX_CODE_BYTES)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.root / f".{sha256}.{secrets.token_hex(6)}.part"
        digest = hashlib.sha256()
        size = 0
        try:
            with partial.open("wb") as out:
                try:
                    async for chunk in chunks:
                        size += len(chunk)
                        if size > self.max_bytes:
                            raise PayloadTooLarge(
                                f"code bundle is over the limit of {self.max_bytes} bytes "
                                "(STRATA_MAX_CODE_BYTES)"
                            )
                        digest.update(chunk)
                        out.write(chunk)
                except ClientDisconnect:
                    raise BadBundle(
                        f"code bundle upload truncated: the client went away after {size} bytes"
                    ) from None
                if declared is not None and size != declared:
                    raise BadBundle(
                        f"code bundle upload truncated: {size} of {declared} bytes received"
                    )
                out.flush()
                os.fsync(out.fileno())
            actual = digest.hexdigest()
            if actual != sha256:
                raise BadBundle(
                    f"code bundle body does not match its digest: its SHA-256 is {actual}, "
                    f"it was sent as {sha256}"
                )
            if final.exists():
                return Stored(sha256, size, created=False)
            await self._write_manifest(sha256, partial)
            os.replace(partial, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        self.uploads += 1
        log.info("code bundle %s stored (%d bytes)", sha256, size)
        return Stored(sha256, size, created=True)

    async def manifest(self, sha256: str) -> CodeManifest:
        """What the stored bundle `sha256` holds; NotFound when there is no such bundle."""
        path = self.path(sha256)
        if not path.is_file():
            raise NotFound(f"no code bundle {sha256} on this server: upload it first")
        try:
            return CodeManifest.model_validate_json(self.manifest_path(sha256).read_bytes())
        except (FileNotFoundError, ValueError):
            pass  # none kept yet, or unreadable: read it again from the bundle
        return await self._write_manifest(sha256, path)

    async def _write_manifest(self, sha256: str, tar_path: Path) -> CodeManifest:
        """Read the manifest of the tar at `tar_path` and keep it beside the bundle (written
        under a temporary name, then renamed); BadBundle when it is not a tar."""
        try:
            manifest = await asyncio.to_thread(read_manifest, sha256, tar_path)
        except NotATar as exc:
            raise BadBundle(
                f"code bundle {sha256} cannot be unpacked by agents: {exc}; "
                "expected a tar archive, like the one `strata submit --code DIR` packs"
            ) from None
        target = self.manifest_path(sha256)
        partial = self.root / f".{target.name}.{secrets.token_hex(6)}.part"
        try:
            partial.write_text(manifest.model_dump_json(), encoding="utf-8")
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        return manifest
