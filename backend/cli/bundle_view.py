"""How `strata jobs show` prints a job's code bundle: digest, size and its first files."""

from __future__ import annotations

from backend.code.schemas import BundleMember, CodeManifest
from backend.rest_client import ClientError, StrataClient
from backend.sizes import human_size

SHOWN = 20  # members listed by default; the rest are counted


def member_line(member: BundleMember) -> str:
    """One member as `ls -F` would suggest it: `src/`, `run -> src/run.py`, `train.py  1.2 KB`."""
    if member.kind == "dir":
        return f"{member.path}/"
    if member.kind == "symlink":
        return f"{member.path} -> {member.target}"
    if member.kind == "hardlink":
        return f"{member.path} (hard link to {member.target})"
    if member.kind == "file":
        return f"{member.path}  {human_size(member.size)}"
    return f"{member.path}  ({member.kind})"


def bundle_lines(manifest: CodeManifest, shown: int = SHOWN) -> list[str]:
    """The bundle's summary line, then up to `shown` members, then how many more there are."""
    files = "file" if manifest.files == 1 else "files"
    lines = [
        f"code: bundle {manifest.sha256}, {human_size(manifest.size)} "
        f"({manifest.files} {files}, {human_size(manifest.unpacked_size)} unpacked)"
    ]
    listed = manifest.listed[: max(shown, 0)]
    lines += [f"  {member_line(member)}" for member in listed]
    rest = manifest.members - len(listed)
    if rest > 0:
        lines.append(f"  … and {rest} more")
    return lines


def describe_bundle(client: StrataClient, sha256: str, shown: int = SHOWN) -> list[str]:
    """The lines about a job's bundle `sha256`: only its digest, and why, when the server
    cannot say more (a bundle removed from its data dir, a server of an older version)."""
    try:
        manifest = client.code_manifest(sha256)
    except ClientError as exc:
        return [f"code: bundle {sha256} ({exc.detail})"]
    return bundle_lines(manifest, shown)
