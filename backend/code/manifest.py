"""What a code bundle holds, read from its tar headers without unpacking anything.

The server reads a bundle once, when it is stored, and keeps the answer beside it as
`<sha256>.manifest.json` (see store.py); the list is capped at MAX_LISTED members so that a
bundle of a million files does not make a manifest as big as itself: the rest are counted.
"""

from __future__ import annotations

import lzma
import tarfile
import zlib
from pathlib import Path

from backend.code.schemas import BundleMember, CodeManifest, MemberKind

MAX_LISTED = 10_000


class NotATar(ValueError):
    """The bytes are not a tar archive the agents could unpack."""


def _kind(member: tarfile.TarInfo) -> MemberKind:
    if member.isfile():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "other"  # devices and fifos: agents refuse to unpack these


def read_manifest(sha256: str, tar_path: Path, max_listed: int = MAX_LISTED) -> CodeManifest:
    """The manifest of the bundle at `tar_path` (stored as `sha256`), in archive order."""
    listed: list[BundleMember] = []
    members = files = unpacked = 0
    try:
        # "r:*" reads what the agents' tarfile.open() reads: plain or compressed tars.
        with tarfile.open(tar_path, mode="r:*") as archive:
            for member in archive:
                members += 1
                kind = _kind(member)
                if kind == "file":
                    files += 1
                    unpacked += member.size
                if len(listed) < max_listed:
                    listed.append(
                        BundleMember(
                            path=member.name,
                            size=member.size if kind == "file" else 0,
                            kind=kind,
                            target=member.linkname if kind in ("symlink", "hardlink") else None,
                        )
                    )
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise NotATar(f"it is not a tar archive ({exc})") from None
    return CodeManifest(
        sha256=sha256,
        size=tar_path.stat().st_size,
        members=members,
        files=files,
        unpacked_size=unpacked,
        listed=listed,
        more=members - len(listed),
    )
