"""The code bundle `strata submit` builds: a deterministic tar of a code dir.

The same tree always gives the same bytes, and so the same SHA-256, wherever and whenever it
is packed: entries in sorted order, every time 0, every owner root with no names, modes
normalised to 0644 / 0755 (a file keeps only whether it is executable), and nothing but
directories, regular files and symlinks (devices, fifos and sockets are left out). Paths that
`.gitignore` files (the dir's own and those below it) or a `.strataignore` at the top ignore
are left out, and so is `.git`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pathspec

IGNORE_FILES = (".gitignore", ".strataignore")
ALWAYS_IGNORED = frozenset({".git"})
CHUNK = 1 << 20


@dataclass
class Bundle:
    """A packed code dir: its bytes in a temporary file, their SHA-256 and size."""

    file: IO[bytes]
    sha256: str
    size: int
    files: int

    def close(self) -> None:
        self.file.close()


def _ignore_spec(path: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(rel: str, is_dir: bool, specs: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    """Whether `rel` (relative to the code dir, '/'-separated) is ignored by any spec whose
    base dir holds it; a spec matches paths relative to its own dir, as git's do."""
    for base, spec in specs:
        if base and not rel.startswith(base + "/"):
            continue
        inner = rel[len(base) + 1 :] if base else rel
        if spec.match_file(inner + "/" if is_dir else inner):
            return True
    return False


def members(root: Path) -> list[tuple[str, Path]]:
    """What goes into the bundle of `root`, in order: (name in the archive, path on disk)."""
    root = root.resolve()
    specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []
    strataignore = _ignore_spec(root / ".strataignore")
    if strataignore is not None:
        specs.append(("", strataignore))
    found: list[tuple[str, Path]] = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(directory)
        base = here.relative_to(root).as_posix()
        base = "" if base == "." else base
        gitignore = _ignore_spec(here / ".gitignore")
        if gitignore is not None:
            specs.append((base, gitignore))
        kept_dirs = []
        for name in sorted(dirnames):
            rel = f"{base}/{name}" if base else name
            path = here / name
            if name in ALWAYS_IGNORED or _ignored(rel, True, specs):
                continue
            if path.is_symlink():  # os.walk lists links to dirs as dirs: a link is a member
                found.append((rel, path))
                continue
            kept_dirs.append(name)
            found.append((rel, path))
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = f"{base}/{name}" if base else name
            if _ignored(rel, False, specs):
                continue
            path = here / name
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                found.append((rel, path))
    return sorted(found)


def _entry(name: str, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    status = path.lstat()
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISLNK(status.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
    elif stat.S_ISDIR(status.st_mode):
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.size = status.st_size
        info.mode = 0o755 if status.st_mode & stat.S_IXUSR else 0o644
    return info


def pack(root: Path) -> Bundle:
    """The bundle of the code dir `root`."""
    if not root.is_dir():
        raise ValueError(f"code dir {root} is not a directory")
    out = tempfile.TemporaryFile()  # noqa: SIM115 - the Bundle owns it and closes it
    count = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, path in members(root):
            info = _entry(name, path)
            if info.isreg():
                count += 1
                with path.open("rb") as data:
                    archive.addfile(info, data)
            else:
                archive.addfile(info)
    size = out.tell()
    out.seek(0)
    digest = hashlib.sha256()
    for chunk in iter(lambda: out.read(CHUNK), b""):
        digest.update(chunk)
    out.seek(0)
    return Bundle(file=out, sha256=digest.hexdigest(), size=size, files=count)
