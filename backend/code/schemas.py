"""What the code routes answer, shared by the server and the client."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

# The header HEAD /code/{sha256} answers with, so that a client learns the limit before it
# uploads.
LIMIT_HEADER = "Strata-Max-Code-Bytes"


class CodeBundleRead(BaseModel):
    sha256: str
    size: int


MemberKind = Literal["file", "dir", "symlink", "hardlink", "other"]


class BundleMember(BaseModel):
    path: str = Field(description="The member's path inside the bundle, '/'-separated.")
    size: int = Field(description="Bytes, for a file; 0 for anything else.")
    kind: MemberKind = Field(
        description="file, dir, symlink, hardlink, or other (a device or fifo, which agents "
        "refuse to unpack)."
    )
    target: str | None = Field(default=None, description="What a symlink or hardlink names.")


class CodeManifest(BaseModel):
    """What a stored code bundle holds, read from its tar headers when it was stored."""

    sha256: str
    size: int = Field(description="The bundle's (the tar's) size in bytes.")
    members: int = Field(description="Every member of the archive: files, dirs and links.")
    files: int = Field(description="How many of the members are regular files.")
    unpacked_size: int = Field(description="The bytes its files hold once unpacked.")
    listed: list[BundleMember] = Field(
        description="The members in archive order (sorted by path for bundles `strata "
        "submit` packs), the first 10,000 at most."
    )
    more: int = Field(description="Members not in `listed`: 0 unless the bundle is that big.")
