"""The agent's persistent identity and its state dir lock."""

from __future__ import annotations

import re
import stat
import subprocess
from pathlib import Path

import pytest

from agents.host.identity import (
    IDENTITY_FILE,
    StateDirError,
    StateDirLock,
    default_state_dir,
    load_or_create_identity,
)
from agents.protocol import IDENTITY_PATTERN
from tests.support.processes import STRATA


def test_an_identity_is_made_once_and_kept(tmp_path: Path) -> None:
    state = tmp_path / "state" / "agent-local-0"
    made = load_or_create_identity(state)
    assert re.fullmatch(r"[0-9a-f]{32}", made) and re.fullmatch(IDENTITY_PATTERN, made)
    assert load_or_create_identity(state) == made  # a restart presents the same one
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert [p.name for p in state.iterdir()] == [IDENTITY_FILE]  # nothing staged is left
    assert load_or_create_identity(tmp_path / "another") != made


def test_a_corrupt_identity_file_is_an_error_not_a_new_identity(tmp_path: Path) -> None:
    (tmp_path / IDENTITY_FILE).write_text("not an identity\n")
    with pytest.raises(StateDirError, match="does not hold an agent identity; delete it"):
        load_or_create_identity(tmp_path)


def test_an_unwritable_state_dir_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StateDirError, match="cannot keep the agent's identity in"):
        load_or_create_identity(tmp_path / "file" / "state")


def test_two_agents_cannot_share_a_state_dir(tmp_path: Path) -> None:
    first, second = StateDirLock(tmp_path), StateDirLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(StateDirError) as taken:
            second.acquire()
        assert str(taken.value) == (
            f"another agent is running with the state dir {tmp_path}: give this one another "
            "--name (or --state-dir)"
        )
    finally:
        first.release()
    second.acquire()  # free again once the first has gone
    second.release()


def test_the_default_state_dir_is_per_name_under_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_dir("local-0") == tmp_path / "strata" / "agent-local-0"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_state_dir("gpu-7") == Path.home() / ".local/state/strata/agent-gpu-7"
    with pytest.raises(StateDirError, match="is not a host name"):
        default_state_dir("../escape")


def test_strata_agent_exits_with_the_state_dir_problem(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / IDENTITY_FILE).write_text("?\n")
    agent = subprocess.run(
        [
            *STRATA,
            "agent",
            "--server",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--workspace",
            str(tmp_path),
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert agent.returncode == 1, agent.stderr
    assert f"strata agent: {state / IDENTITY_FILE} does not hold an agent identity" in agent.stderr
