"""Task logs: one append-only file per task attempt under the data dir, capped in size.

Agents number the lines they send, so a batch that arrives twice (after a reconnect) is
written once: the store remembers how many lines of each attempt it has received and skips
what it has. Readers and stream cursors count lines of the file itself, which can differ
from the agent's numbering by the marker lines the store writes (a gap, the size cap).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agents.vocabulary import TaskName
from backend.errors import FieldIssue, InvalidInput, NotFound

TRUNCATED = "[strata] log cap reached; later lines of this attempt are not kept"


class LogOutsideRoot(NotFound):
    """A log path that resolves (through a symlink) outside the log root: never followed."""


# Called with (job_id, task, attempt, first file line, lines) for every append that wrote.
OnAppend = Callable[[int, str, int, int, list[str]], None]


@dataclass(frozen=True)
class LogSlice:
    first_line: int
    lines: list[str]
    total_lines: int


@dataclass
class _FileState:
    received: int  # lines received, in the agent's numbering
    written: int  # lines in the file
    size: int  # bytes in the file


class LogStore:
    def __init__(self, root: Path, max_bytes: int, on_append: OnAppend | None = None) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.on_append = on_append
        self._files: dict[Path, _FileState] = {}

    def path(self, job_id: int, task: str, attempt: int) -> Path:
        """The attempt's log file, which must stay under the root (symlinks included)."""
        issues = []
        if job_id < 1:
            issues.append(FieldIssue("job_id", f"must be 1 or more, got {job_id}"))
        # The REST path and the agent protocol check task names already; the store checks
        # again, since the name becomes part of a file name.
        name: TaskName | None = None
        try:
            name = TaskName.parse(task)
        except ValueError as exc:
            issues.append(FieldIssue("task", str(exc)))
        if attempt < 0:
            issues.append(FieldIssue("attempt", f"must be 0 or more, got {attempt}"))
        if issues or name is None:
            raise InvalidInput(issues)
        path = self.root / f"job-{job_id}" / f"{name.role}-{name.index}.{attempt}.log"
        root = self.root.resolve()
        if not path.resolve().is_relative_to(root):
            raise LogOutsideRoot(
                f"the log of {task} attempt {attempt} of job {job_id} resolves outside the "
                f"log root {root} (a symlink?); it is neither read nor written"
            )
        return path

    def _state(self, path: Path) -> _FileState:
        state = self._files.get(path)
        if state is None:
            data = path.read_bytes() if path.exists() else b""
            lines = data.count(b"\n")
            # After a restart the agent's numbering is taken to match the file's.
            state = self._files[path] = _FileState(received=lines, written=lines, size=len(data))
        return state

    def received(self, job_id: int, task: str, attempt: int) -> int:
        """Lines received so far, in the agent's numbering: the next one it should send."""
        return self._state(self.path(job_id, task, attempt)).received

    def lines_in(self, job_id: int, task: str, attempt: int) -> int:
        return self._state(self.path(job_id, task, attempt)).written

    def append(
        self, job_id: int, task: str, attempt: int, first_line: int, lines: list[str]
    ) -> int:
        """Append the lines not yet stored; returns how many were new."""
        path = self.path(job_id, task, attempt)
        state = self._state(path)
        have = state.received
        if first_line > have:
            # A gap: the agent dropped lines while it could not reach us. Say so in the log.
            fresh = [f"[strata] {first_line - have} lines were lost in transit", *lines]
        else:
            fresh = lines[have - first_line :]
        if not fresh:
            return 0
        state.received = max(have, first_line + len(lines))
        kept: list[str] = []
        for line in fresh:
            encoded = len(line.encode()) + 1
            if state.size + encoded > self.max_bytes:
                if state.size < self.max_bytes:
                    kept.append(TRUNCATED)
                    state.size = self.max_bytes
                break
            kept.append(line)
            state.size += encoded
        if kept:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8", errors="replace") as handle:
                handle.write("".join(f"{line}\n" for line in kept))
            first_written, state.written = state.written, state.written + len(kept)
            if self.on_append is not None:
                self.on_append(job_id, task, attempt, first_written, kept)
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
                for total, line in enumerate(handle, start=1):  # noqa: B007 - used after
                    last.append(line.rstrip("\n"))
                return LogSlice(first_line=total - len(last), lines=list(last), total_lines=total)
            lines: list[str] = []
            total = 0
            for total, line in enumerate(handle, start=1):
                if offset < total <= offset + limit:
                    lines.append(line.rstrip("\n"))
            return LogSlice(first_line=min(offset, total), lines=lines, total_lines=total)
