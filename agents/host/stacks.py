"""The stacks of a hung attempt's threads, written into its log before it is restarted.

For each process of the attempt, each thread's state and kernel wait channel from /proc
(where the thread is blocked in the kernel; the kernel stack too where /proc lets us read
it), and the Python stacks of every thread through the runtime's faulthandler: the agent
gives each task a signal number (STRATA_STACKS_SIGNAL) and the runtime registers faulthandler
for it (agents.runtime.stacks), which writes straight to the task's stderr from a C signal
handler, whatever the interpreter's threads are blocked in. The agent sends that signal only
to a process whose /proc status says it catches it: to any other its default action would
end the process. A stopped process (SIGSTOP, state T) runs no handler: its state says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["STACKS_SIGNAL", "catches", "collect", "thread_lines"]

# A real-time signal: nothing in TensorFlow or Python's standard library uses it.
STACKS_SIGNAL = int(signal.SIGRTMIN) + 5
PROC = Path("/proc")
MAX_THREADS = 512  # listed per process; a process with more is cut, saying so
KERNEL_FRAMES = 8

_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible wait (disk or network filesystem)",
    "T": "stopped",
    "t": "stopped by a tracer",
    "Z": "zombie",
}


def catches(pid: int, signum: int, proc: Path = PROC) -> bool:
    """Whether the process has a handler for `signum` (its SigCgt mask in /proc)."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _thread_line(task_dir: Path) -> list[str]:
    stat = _read(task_dir / "stat")
    if stat is None:
        return []
    # pid (comm) state ...: comm may hold spaces and parentheses, so split at the last ')'.
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    state = stat[stat.rfind(")") + 2 :].split(" ", 1)[0]
    wchan = _read(task_dir / "wchan")
    line = f"  thread {task_dir.name} {name!r}: {_STATES.get(state, state)}"
    if wchan and wchan != "0":
        line += f", waiting in {wchan}"
    lines = [line]
    kernel = _read(task_dir / "stack")  # root only, on most kernels
    if kernel:
        lines += [f"    {frame}" for frame in kernel.splitlines()[:KERNEL_FRAMES]]
    return lines


def thread_lines(pid: int, proc: Path = PROC) -> list[str]:
    """One line per thread of the process: name, state, wait channel (and kernel frames)."""
    try:
        tids = sorted((proc / str(pid) / "task").iterdir(), key=lambda p: int(p.name))
    except (OSError, ValueError):
        return [f"  (pid {pid} is gone)"]
    lines: list[str] = []
    for task_dir in tids[:MAX_THREADS]:
        lines += _thread_line(task_dir)
    if len(tids) > MAX_THREADS:
        lines.append(f"  ... {len(tids) - MAX_THREADS} more threads")
    return lines


def collect(
    label: str,
    pids: Iterable[int],
    emit: Callable[[list[str]], None],
    *,
    signum: int = STACKS_SIGNAL,
    reason: str = "",
    proc: Path = PROC,
) -> int:
    """Writes the threads of each process into the log (`emit`) and asks each process that
    can to dump its Python stacks; returns how many were asked."""
    asked = 0
    for pid in sorted(set(pids)):
        why = f" ({reason})" if reason else ""
        lines = [f"strata: threads of {label}, pid {pid}{why}:", *thread_lines(pid, proc)]
        python = catches(pid, signum, proc)
        lines.append(
            "strata: its Python stacks follow on stderr"
            if python
            else "strata: no Python stacks: the Strata runtime's handler is not installed there"
        )
        emit(lines)
        if python:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
                asked += 1
    return asked
