"""Task log files: resent batches are stored once, gaps are marked, size is capped."""

from __future__ import annotations

from pathlib import Path

from backend.streams.logs import TRUNCATED, LogStore


def test_resent_and_overlapping_batches_are_stored_once(tmp_path: Path) -> None:
    store = LogStore(tmp_path, max_bytes=1 << 20)
    assert store.append(1, "worker:0", 0, 0, ["a", "b"]) == 2
    assert store.append(1, "worker:0", 0, 0, ["a", "b"]) == 0
    assert store.append(1, "worker:0", 0, 1, ["b", "c"]) == 1
    assert store.read(1, "worker:0", 0).lines == ["a", "b", "c"]


def test_line_counts_survive_a_restart(tmp_path: Path) -> None:
    LogStore(tmp_path, 1 << 20).append(1, "chief:0", 0, 0, ["a", "b"])
    again = LogStore(tmp_path, 1 << 20)
    assert again.append(1, "chief:0", 0, 0, ["a", "b", "c"]) == 1
    assert again.read(1, "chief:0", 0).lines == ["a", "b", "c"]


def test_a_gap_is_said_in_the_log(tmp_path: Path) -> None:
    store = LogStore(tmp_path, 1 << 20)
    store.append(1, "chief:0", 0, 0, ["a"])
    store.append(1, "chief:0", 0, 5, ["f"])
    assert store.read(1, "chief:0", 0).lines == ["a", "[strata] 4 lines were lost in transit", "f"]


def test_attempts_have_separate_files_and_tail_and_offset_work(tmp_path: Path) -> None:
    store = LogStore(tmp_path, 1 << 20)
    store.append(2, "ps:0", 0, 0, [f"line {i}" for i in range(10)])
    store.append(2, "ps:0", 1, 0, ["second attempt"])
    tail = store.read(2, "ps:0", 0, tail=3)
    assert (tail.first_line, tail.lines, tail.total_lines) == (
        7,
        ["line 7", "line 8", "line 9"],
        10,
    )
    page = store.read(2, "ps:0", 0, offset=4, limit=2)
    assert (page.first_line, page.lines) == (4, ["line 4", "line 5"])
    assert store.read(2, "ps:0", 1).lines == ["second attempt"]
    assert store.read(2, "ps:0", 7).lines == []


def test_size_cap_keeps_the_start_and_says_so(tmp_path: Path) -> None:
    store = LogStore(tmp_path, max_bytes=20)
    store.append(1, "chief:0", 0, 0, ["0123456789", "0123456789", "more"])
    store.append(1, "chief:0", 0, 3, ["even more"])
    assert store.read(1, "chief:0", 0).lines == ["0123456789", TRUNCATED]
