"""`strata hosts drain|undrain|notice NAME` against a real server process: each reaches its
route and says what it did, or names the host that does not exist."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.config import Settings
from backend.db import create_engine, session_factory
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.cli import run_strata
from tests.support.factories import make_host
from tests.support.processes import strata_server

pytestmark = pytest.mark.slow  # the server in a subprocess

TOKENS = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}


async def add_host(data_dir: Path, name: str) -> None:
    """A host row as an agent's hello leaves it (no agent needs to run for these commands)."""
    engine = create_engine(Settings(data_dir=data_dir).resolved_database_url)
    try:
        async with session_factory(engine)() as session:
            await make_host(session, name)
            await session.commit()
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("hosts-cli") / "data"
    with strata_server(data_dir, TOKENS) as url:
        asyncio.run(add_host(data_dir, "gpu-7"))
        yield url


def strata(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_SERVER": url, "STRATA_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
    return run_strata(args, env)


def test_drain_undrain_and_notice_say_what_they_did(server_url: str) -> None:
    def ok(*args: str) -> str:
        done = strata("hosts", *args, url=server_url)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert ok("drain", "gpu-7", "--deadline", "30") == "draining gpu-7: online, drained"
    assert ok("undrain", "gpu-7") == "gpu-7 is in service: online"
    assert ok("notice", "gpu-7", "--seconds", "90", "--reason", "spot reclaim") == (
        "gpu-7 goes in 90s: its jobs are being moved off"
    )
    for command in ("drain", "undrain", "notice"):
        missing = strata("hosts", command, "nowhere", url=server_url)
        assert missing.returncode == 1 and "host nowhere does not exist" in missing.stderr
    bad = strata("hosts", "notice", "gpu-7", "--seconds", "0", url=server_url)
    assert bad.returncode == 2 and "--seconds" in bad.stderr


def test_cordon_shows_in_the_list_and_uncordon_clears_it(server_url: str) -> None:
    cordoned = strata("hosts", "cordon", "gpu-7", "--reason", "fan noise", url=server_url)
    assert cordoned.returncode == 0, cordoned.stderr
    assert cordoned.stdout.strip() == "cordoned gpu-7: fan noise"
    listed = strata("hosts", url=server_url)
    assert "cordoned (manual): fan noise" in listed.stdout
    cleared = strata("hosts", "uncordon", "gpu-7", url=server_url)
    assert (cleared.returncode, cleared.stdout.strip()) == (0, "gpu-7 takes tasks again")
    assert "cordoned" not in strata("hosts", url=server_url).stdout
    for command in (("cordon", "nowhere", "--reason", "x"), ("uncordon", "nowhere")):
        missing = strata("hosts", *command, url=server_url)
        assert missing.returncode == 1 and "host nowhere does not exist" in missing.stderr
