"""`strata projects quota NAME [--max-gpus N|none] [--max-priority P|none]
[--[no-]preempt-other-projects]` against a real server process: shows the quotas, sets only
those given, clears one with `none`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.cli import run_strata
from tests.support.processes import strata_server

pytestmark = pytest.mark.slow  # the server in a subprocess

TOKENS = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with strata_server(tmp_path_factory.mktemp("quota-cli") / "data", TOKENS) as url:
        yield url


def strata(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_SERVER": url, "STRATA_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
    return run_strata(args, env)


def test_quotas_are_shown_set_one_at_a_time_and_cleared(server_url: str) -> None:
    def quota(*options: str) -> str:
        done = strata("projects", "quota", "default", *options, url=server_url)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    others = ", may preempt other projects"
    assert quota() == "project default: max GPUs no limit, max priority no limit" + others
    assert quota("--max-gpus", "8") == "project default: max GPUs 8, max priority no limit" + others
    assert quota("--max-priority", "10") == "project default: max GPUs 8, max priority 10" + others
    assert quota("--no-preempt-other-projects") == (
        "project default: max GPUs 8, max priority 10, may not preempt other projects"
    )
    assert quota("--max-gpus", "none") == (
        "project default: max GPUs no limit, max priority 10, may not preempt other projects"
    )
    assert quota("--preempt-other-projects") == (
        "project default: max GPUs no limit, max priority 10" + others
    )
    listed = strata("projects", "ls", url=server_url).stdout
    assert "default" in listed and " 10 " in listed

    bad = strata("projects", "quota", "default", "--max-gpus", "many", url=server_url)
    assert bad.returncode == 2 and "expected a whole number or none" in bad.stderr
    over = strata("projects", "quota", "default", "--max-priority", "500", url=server_url)
    assert over.returncode == 1 and "max_priority" in over.stderr
    missing = strata("projects", "quota", "nowhere", "--max-gpus", "1", url=server_url)
    assert missing.returncode == 1 and "error (404)" in missing.stderr
