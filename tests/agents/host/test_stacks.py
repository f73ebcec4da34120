"""Stacks of a hung attempt, on real processes: a process whose runtime registered the stacks
signal dumps every thread's Python stack to its stderr when asked; one without the handler is
never sent the signal (it would die of it); a stopped one shows as stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.host.stacks import STACKS_SIGNAL, catches, collect, thread_lines

REPO = Path(__file__).resolve().parents[3]

# Registers the handler as the runtime does (STRATA_STACKS_SIGNAL), then blocks in a read.
BLOCKED = """
import os, sys
from agents.runtime.stacks import install
assert install()
def read_that_never_returns():
    read_end, write_end = os.pipe()
    print("ready", flush=True)
    os.read(read_end, 1)
read_that_never_returns()
"""


def start(code: str, stderr: Path, **env: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        stdout=subprocess.PIPE,
        stderr=stderr.open("wb"),
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    return process


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def wait_for_thread_state(pid: int, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in thread_lines(pid)):
        assert time.monotonic() < deadline, thread_lines(pid)
        time.sleep(0.05)


def wait_for_text(path: Path, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text()
        if text in content:
            return content
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}: {path.read_text()!r}")


def test_a_process_with_the_runtime_s_handler_dumps_its_python_stacks(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    stderr = tmp_path / "stderr"
    process = start(BLOCKED, stderr, STRATA_STACKS_SIGNAL=str(STACKS_SIGNAL))
    processes.append(process)
    assert catches(process.pid, STACKS_SIGNAL)
    wait_for_thread_state(process.pid, "waiting in")  # it has reached its read
    lines: list[str] = []
    assert collect("worker:1 attempt 0", [process.pid], lines.extend, reason="hung") == 1
    assert lines[0] == f"strata: threads of worker:1 attempt 0, pid {process.pid} (hung):"
    assert any("waiting in" in line for line in lines[1:-1])
    assert lines[-1] == "strata: its Python stacks follow on stderr"
    dumped = wait_for_text(stderr, "in read_that_never_returns")
    assert "Current thread" in dumped
    assert process.poll() is None  # dumping is harmless: it still runs


def test_a_process_without_the_handler_is_left_alone(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    process = start(BLOCKED.replace("assert install()", "install()"), tmp_path / "stderr")
    processes.append(process)
    assert not catches(process.pid, STACKS_SIGNAL)
    lines: list[str] = []
    assert collect("chief:0 attempt 2", [process.pid], lines.extend) == 0
    assert "no Python stacks" in lines[-1]
    time.sleep(0.2)
    assert process.poll() is None  # never sent the signal, whose default would end it


def test_a_stopped_process_shows_as_stopped(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    process = start(BLOCKED, tmp_path / "stderr", STRATA_STACKS_SIGNAL=str(STACKS_SIGNAL))
    processes.append(process)
    os.kill(process.pid, signal.SIGSTOP)
    wait_for_thread_state(process.pid, ": stopped")
    assert thread_lines(2**22 + 12345) == [f"  (pid {2**22 + 12345} is gone)"]
