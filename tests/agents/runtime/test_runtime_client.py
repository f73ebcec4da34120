"""The client coordinator's pure parts: where the servers reach it, which checkpoint dirs it
can write, whether a predecessor's process is alive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.runtime.client import (
    ConnectError,
    Connection,
    address_towards,
    coordinator_address,
    pid_alive,
    usable_checkpoint_dir,
)


def test_the_coordinator_serves_at_its_address_towards_the_workers() -> None:
    cluster = {"worker": ["127.0.0.1:20000"], "ps": ["127.0.0.1:20001"]}
    assert address_towards("127.0.0.1:20000") == "127.0.0.1"
    assert coordinator_address(cluster, None, 47000) == "127.0.0.1:47000"
    assert coordinator_address(cluster, "10.0.0.5", 47000) == "10.0.0.5:47000"
    assert coordinator_address(cluster, "fd00::5", 47000) == "[fd00::5]:47000"
    host, port = coordinator_address(cluster, None, None).rsplit(":", 1)
    assert host == "127.0.0.1" and 1024 <= int(port) <= 65535


def test_a_checkpoint_dir_the_client_cannot_write_is_refused(tmp_path: Path) -> None:
    usable_checkpoint_dir(str(tmp_path / "not" / "yet" / "there"))  # made on the first save
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root writes anywhere: a file where the dir would be instead
        blocked = tmp_path / "a-file"
        blocked.write_text("")
        with pytest.raises(ConnectError, match="cannot be written from here"):
            usable_checkpoint_dir(str(blocked / "job-1"))
    else:
        with pytest.raises(ConnectError, match="mount the fleet's checkpoint root"):
            usable_checkpoint_dir(str(locked / "job-1"))


def test_a_dead_predecessor_is_told_from_a_live_one() -> None:
    assert pid_alive(os.getpid())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not pid_alive(gone.pid)


class FlakyServer:
    """Answers the detach with the given outcomes in turn (None: accepted)."""

    def __init__(self, *outcomes: Exception | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str]] = []

    def __call__(self, method: str, path: str, body: object = None) -> None:
        self.calls.append((method, path))
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome


def connection_to(server: FlakyServer) -> Connection:
    connection = Connection(server="http://x", token=None, job_id=7, session=2, heartbeat_seconds=5)
    connection.request = server  # type: ignore[method-assign]
    return connection


def test_a_detach_the_server_could_not_take_is_tried_again() -> None:
    server = FlakyServer(ConnectError("busy", 503), OSError("restarting"), None)
    connection_to(server).disconnect(pauses=(0, 0, 0, 0))
    assert server.calls == [("DELETE", "/jobs/7/client/2")] * 3


def test_a_detach_refused_for_good_is_not_tried_again() -> None:
    server = FlakyServer(ConnectError("taken over", 409))
    connection_to(server).disconnect(pauses=(0, 0))
    assert len(server.calls) == 1


def test_a_detach_gives_up_after_its_pauses_and_only_once() -> None:
    server = FlakyServer(*[ConnectError("down", 502)] * 3)
    connection = connection_to(server)
    connection.disconnect(pauses=(0, 0))
    connection.disconnect(pauses=(0, 0))  # atexit after the notebook's own call
    assert len(server.calls) == 3
