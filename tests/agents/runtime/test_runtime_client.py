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
