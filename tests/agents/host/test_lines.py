"""Output becomes lines however it is chunked; \\r ends a line like \\n does."""

from __future__ import annotations

import pytest

from agents.host.lines import LineSplitter
from agents.protocol import MAX_LOG_LINE

STREAM = b"epoch 1\nbar 10%\rbar 50%\rbar 100%\r\nlast without newline"
EXPECTED = ["epoch 1", "bar 10%", "bar 50%", "bar 100%", "last without newline"]


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_any_chunking_gives_the_same_lines(size: int) -> None:
    splitter = LineSplitter()
    lines: list[str] = []
    for start in range(0, len(STREAM), size):
        lines += splitter.feed(STREAM[start : start + size])
    assert lines + splitter.close() == EXPECTED


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"a\r") == []
    assert splitter.feed(b"\nb\n") == ["a", "b"]


def test_empty_lines_and_invalid_utf8() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"\n\n\xff\xfe ok\n") == ["", "", "\ufffd\ufffd ok"]


def test_endless_line_is_cut() -> None:
    splitter = LineSplitter()
    lines = splitter.feed(b"x" * (MAX_LOG_LINE * 2 + 10))
    assert [len(line) for line in lines] == [MAX_LOG_LINE, MAX_LOG_LINE]
    assert splitter.close() == ["x" * 10]


def test_lines_are_cut_at_the_limit_the_splitter_is_given() -> None:
    splitter = LineSplitter(300)
    (line,) = splitter.feed(b"y" * 1000 + b"\n")
    assert len(line) == 300
    assert line.endswith(" more characters]")
    endless = splitter.feed(b"x" * 700)
    assert [len(piece) for piece in endless] == [300, 300]
    assert splitter.close() == ["x" * 100]
