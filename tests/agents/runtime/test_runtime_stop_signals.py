"""While its agent gives notice, a task holds back a SIGTERM the agent did not send (Slurm and
systemd signal every process of the agent's) and obeys the agent's own, which the agent marks
by creating the attempt's stop file first. Real processes and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.runtime.stop_signals import STOP_FILE_ENV, hold_outside_sigterms

REPO = Path(__file__).resolve().parents[3]

CHIEF = """
import sys, time
from agents.runtime.stop_signals import hold_outside_sigterms
release = hold_outside_sigterms("chief:0")
print("held" if release else "not held", flush=True)
while True:
    time.sleep(0.1)
"""

SERVER = """
import time
from agents.runtime.server import exit_on_stop_signals
exit_on_stop_signals("ps:0")
print("held", flush=True)
while True:
    time.sleep(0.1)
"""


def start(code: str, stop_file: Path | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != STOP_FILE_ENV}
    env["PYTHONPATH"] = str(REPO)
    if stop_file is not None:
        env[STOP_FILE_ENV] = str(stop_file)
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.readline()  # its handler is in place
    return process


def held_back_once(process: subprocess.Popen[str]) -> str:
    """SIGTERM from someone else: the process says it goes on, and does."""
    assert process.stderr is not None
    process.send_signal(signal.SIGTERM)
    line = process.stderr.readline()
    assert process.poll() is None
    return line


@pytest.mark.parametrize(("code", "name", "ended"), [(CHIEF, "chief:0", -15), (SERVER, "ps:0", 0)])
def test_a_sigterm_the_agent_did_not_send_is_held_back_and_its_own_obeyed(
    tmp_path: Path, code: str, name: str, ended: int
) -> None:
    stop_file = tmp_path / "attempt.stop"
    process = start(code, stop_file)
    try:
        line = held_back_once(process)
        assert line.startswith(f"strata: {name} goes on: a SIGTERM its agent did not send"), line
        stop_file.touch()  # what the agent does just before its own SIGTERM
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == ended
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(("code", "ended"), [(CHIEF, -15), (SERVER, 0)])
def test_without_a_stop_file_every_sigterm_is_obeyed(code: str, ended: int) -> None:
    process = start(code, None)
    try:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == ended
    finally:
        process.kill()
        process.wait()


def test_nothing_is_installed_without_a_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STOP_FILE_ENV, raising=False)
    before = signal.getsignal(signal.SIGTERM)
    assert hold_outside_sigterms("chief:0") is None
    assert signal.getsignal(signal.SIGTERM) is before


def test_releasing_puts_the_previous_handler_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(STOP_FILE_ENV, str(tmp_path / "attempt.stop"))
    before = signal.getsignal(signal.SIGTERM)
    release = hold_outside_sigterms("chief:0")
    assert release is not None
    assert signal.getsignal(signal.SIGTERM) is not before
    release()
    assert signal.getsignal(signal.SIGTERM) is before
