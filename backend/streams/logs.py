"""Task logs: one append-only file per task attempt under the data dir, capped in size.

Agents number the lines they send, so a batch that arrives twice (after a reconnect) is
written once: the store remembers how many lines each file holds and skips what it has.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path

TRUNCATED = "[strata] log cap reached; later lines of this attempt are not kept"


@dataclass(frozen=True)
class LogSlice:
    first_line: int
    lines: list[str]
    total_lines: int


class LogStore:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lines: dict[Path, int] = {}  # lines received (written or past the cap)
        self._bytes: dict[Path, int] = {}

    def path(self, job_id: int, task: str, attempt: int) -> Path:
        role, index = task.split(":")
        return self.root / f"job-{job_id}" / f"{role}-{index}.{attempt}.log"

    def _state(self, path: Path) -> tuple[int, int]:
        if path not in self._lines:
            if path.exists():
                data = path.read_bytes()
                self._lines[path] = data.count(b"\n")
                self._bytes[path] = len(data)
            else:
                self._lines[path], self._bytes[path] = 0, 0
        return self._lines[path], self._bytes[path]

    def append(
        self, job_id: int, task: str, attempt: int, first_line: int, lines: list[str]
    ) -> int:
        """Append the lines not yet stored; returns how many were new."""
        path = self.path(job_id, task, attempt)
        have, size = self._state(path)
        fresh = lines[max(0, have - first_line) :] if first_line <= have else []
        if first_line > have:
            # A gap: the agent dropped lines while it could not reach us. Say so in the log.
            fresh = [f"[strata] {first_line - have} lines were lost in transit", *lines]
        if not fresh:
            return 0
        path.parent.mkdir(parents=True, exist_ok=True)
        kept: list[str] = []
        for line in fresh:
            encoded = len(line.encode()) + 1
            if size + encoded > self.max_bytes:
                if size < self.max_bytes:
                    kept.append(TRUNCATED)
                    size = self.max_bytes
                break
            kept.append(line)
            size += encoded
        if kept:
            with path.open("a", encoding="utf-8", errors="replace") as handle:
                handle.write("".join(f"{line}\n" for line in kept))
        self._lines[path] = max(have, first_line) + len(lines)
        self._bytes[path] = size
        return len(fresh)

    def read(
        self,
        job_id: int,
        task: str,
        attempt: int,
        *,
        offset: int = 0,
        limit: int = 1000,
        tail: int | None = None,
    ) -> LogSlice:
        """Lines [offset, offset+limit) of an attempt's log, or its last `tail` lines."""
        path = self.path(job_id, task, attempt)
        if not path.exists():
            return LogSlice(first_line=0, lines=[], total_lines=0)
        with path.open(encoding="utf-8", errors="replace") as handle:
            if tail is not None:
                last: deque[str] = deque(maxlen=tail)
                total = 0
                for total, line in enumerate(handle, start=1):  # noqa: B007
                    last.append(line.rstrip("\n"))
                return LogSlice(first_line=total - len(last), lines=list(last), total_lines=total)
            lines: list[str] = []
            total = 0
            for total, line in enumerate(handle, start=1):
                if offset < total <= offset + limit:
                    lines.append(line.rstrip("\n"))
            return LogSlice(first_line=min(offset, total), lines=lines, total_lines=total)
