"""The code bundle `strata submit` builds: the same tree gives the same bytes, and what the
ignore files name stays out."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from backend.code.archive import Bundle, members, pack


def tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o775)
    return root


def names(bundle: Bundle) -> list[str]:
    with tarfile.open(fileobj=bundle.file) as archive:
        return archive.getnames()


def test_the_same_tree_packs_to_the_same_bytes_wherever_and_whenever(tmp_path: Path) -> None:
    one = tree(tmp_path / "one")
    two = tree(tmp_path / "two")
    os.utime(two / "train.py", (1_000_000, 1_000_000))
    (two / "pkg" / "model.py").chmod(0o600)  # only the executable bit counts
    first, second = pack(one), pack(two)
    try:
        assert first.sha256 == second.sha256
        assert first.file.read() == second.file.read()
        assert first.files == 3
    finally:
        first.close()
        second.close()
    (two / "train.py").write_text("print('changed')\n")
    changed = pack(two)
    assert changed.sha256 != first.sha256
    changed.close()


def test_entries_are_sorted_with_fixed_times_owners_and_modes(tmp_path: Path) -> None:
    bundle = pack(tree(tmp_path / "code"))
    with tarfile.open(fileobj=bundle.file) as archive:
        entries = archive.getmembers()
    bundle.close()
    assert [e.name for e in entries] == ["pkg", "pkg/model.py", "run.sh", "train.py"]
    assert {(e.mtime, e.uid, e.gid, e.uname, e.gname) for e in entries} == {(0, 0, 0, "", "")}
    modes = {e.name: e.mode for e in entries}
    assert modes == {"pkg": 0o755, "pkg/model.py": 0o644, "run.sh": 0o755, "train.py": 0o644}


def test_gitignore_strataignore_and_dot_git_stay_out(tmp_path: Path) -> None:
    root = tree(tmp_path / "code")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / ".gitignore").write_text("*.ckpt\ndata/\n!keep.ckpt\n")
    (root / ".strataignore").write_text("notes.txt\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"0" * 100)
    (root / "w.ckpt").write_text("w")
    (root / "keep.ckpt").write_text("k")
    (root / "notes.txt").write_text("n")
    (root / "pkg" / ".gitignore").write_text("generated.py\n")
    (root / "pkg" / "generated.py").write_text("")
    listed = [name for name, _ in members(root)]
    assert listed == [
        ".gitignore",
        ".strataignore",
        "keep.ckpt",
        "pkg",
        "pkg/.gitignore",
        "pkg/model.py",
        "run.sh",
        "train.py",
    ]


def test_symlinks_are_kept_as_links_and_fifos_are_left_out(tmp_path: Path) -> None:
    root = tree(tmp_path / "code")
    (root / "link.py").symlink_to("train.py")
    os.mkfifo(root / "pipe")
    bundle = pack(root)
    with tarfile.open(fileobj=bundle.file) as archive:
        link = archive.getmember("link.py")
        assert link.issym() and link.linkname == "train.py"
        assert "pipe" not in archive.getnames()
    bundle.close()
