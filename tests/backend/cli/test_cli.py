"""The `strata` client commands against a real server process."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.cli import run_strata
from tests.support.factories import make_spec
from tests.support.processes import STRATA, stop, strata_server

# Every command is a fresh `strata` process: too slow for `make check`.
pytestmark = pytest.mark.slow

TOKENS = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with strata_server(tmp_path_factory.mktemp("cli") / "data", TOKENS) as url:
        yield url


def strata(
    *args: str, url: str, token: str | None = ADMIN_TOKEN
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_SERVER": url, "COLUMNS": "200"}
    env.pop("STRATA_TOKEN", None)
    if token is not None:
        env["STRATA_TOKEN"] = token
    return run_strata(args, env)


def test_submit_list_show_cancel(server_url: str) -> None:
    submitted = strata("submit", "examples/digits_ps.yaml", url=server_url)
    assert submitted.returncode == 0, submitted.stderr
    assert "submitted to project default: pending" in submitted.stdout
    job_id = submitted.stdout.split()[1]

    listed = strata("jobs", "ls", url=server_url)
    assert listed.returncode == 0
    row = next(line for line in listed.stdout.splitlines() if f" {job_id} " in f" {line} ")
    assert "digits-ps" in row and "pending" in row and "2 worker" in row

    shown = strata("jobs", "show", job_id, url=server_url)
    assert shown.returncode == 0
    assert "worker:1" in shown.stdout and "ps:0" in shown.stdout and "created" in shown.stdout
    # Restarts of every kind, and the failures among them that spend the policy's budget.
    assert "FAILURES" in listed.stdout and "FAILURES" in shown.stdout
    assert re.search(r"restarts: 0 \(0 after failures, of \d+ the policy allows\)", shown.stdout)

    cancelled = strata("jobs", "cancel", job_id, url=server_url)
    assert cancelled.returncode == 0
    assert f"job {job_id} is cancelled" in cancelled.stdout

    again = strata("jobs", "cancel", job_id, url=server_url)
    assert again.returncode == 1
    assert "error (409)" in again.stderr and "cannot become cancelled" in again.stderr

    only_pending = strata("jobs", "ls", "--status", "pending", url=server_url)
    assert f" {job_id} " not in only_pending.stdout


def test_bad_spec_prints_each_field(server_url: str, tmp_path: Path) -> None:
    import yaml

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(make_spec(entrypoint="python train.py", name="a/b")))
    result = strata("submit", str(bad), url=server_url)
    assert result.returncode == 1
    assert "error (422)" in result.stderr
    assert "entrypoint: must be an argv list such as [python, train.py," in result.stderr
    assert "name: must be 1-63 characters" in result.stderr

    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(make_spec(replicas={"chief": {"count": 1}})))
    result = strata("submit", str(rules), url=server_url)
    assert "replicas.worker.count: parameter_server needs at least one worker" in result.stderr
    assert "replicas.ps.count: parameter_server needs at least one ps" in result.stderr


def test_auth_errors_are_explained(server_url: str) -> None:
    no_token = strata("jobs", "ls", url=server_url, token=None)
    assert no_token.returncode == 1 and "missing bearer token" in no_token.stderr
    agent = strata("submit", "examples/digits_ps.yaml", url=server_url, token=AGENT_TOKEN)
    assert agent.returncode == 1 and "error (403)" in agent.stderr


def test_hosts_and_unknown_job(server_url: str) -> None:
    hosts = strata("hosts", url=server_url)
    assert hosts.returncode == 0 and "NAME" in hosts.stdout
    missing = strata("jobs", "show", "99999", url=server_url)
    assert missing.returncode == 1 and "job 99999 does not exist" in missing.stderr


def test_unreachable_server_is_a_clear_error() -> None:
    result = strata("jobs", "ls", url="http://127.0.0.1:9")
    assert result.returncode == 1
    assert "cannot reach the server" in result.stderr


def test_server_refuses_to_start_without_tokens(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env["STRATA_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [*STRATA, "server"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "STRATA_API_TOKEN" in result.stdout


def test_the_server_logs_its_own_messages_with_the_time(tmp_path: Path) -> None:
    # Uvicorn configures only its own loggers; the control plane's go beside them.
    with strata_server(tmp_path / "data", TOKENS):
        pass
    (log,) = tmp_path.glob("server-*.log")
    lines = log.read_text().splitlines()
    ready = [line for line in lines if "database ready" in line]
    assert len(ready) == 1, lines
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO: +backend\.app: database ready \(sqlite\)",
        ready[0],
    ), ready[0]


def test_tokens_are_created_listed_and_revoked(server_url: str) -> None:
    created = strata("tokens", "create", "grafana", "--expires", "30d", url=server_url)
    assert created.returncode == 0, created.stderr
    header, secret, *_ = created.stdout.splitlines()
    token_id = header.split()[1]
    assert "(grafana, viewer) created" in header and secret.startswith("stk_")

    listed = strata("tokens", "ls", url=server_url)
    row = next(line for line in listed.stdout.splitlines() if " grafana " in line)
    assert "viewer" in row and "active" in row and secret not in listed.stdout

    assert strata("jobs", "ls", url=server_url, token=secret).returncode == 0
    refused = strata("submit", "examples/digits_ps.yaml", url=server_url, token=secret)
    assert refused.returncode == 1 and "error (403)" in refused.stderr

    revoked = strata("tokens", "revoke", token_id, url=server_url)
    assert revoked.returncode == 0 and f"token {token_id} (grafana) revoked" in revoked.stdout
    after = strata("jobs", "ls", url=server_url, token=secret)
    assert after.returncode == 1 and "error (401)" in after.stderr

    bad = strata("tokens", "create", "x", "--expires", "soon", url=server_url)
    assert bad.returncode == 2 and "expected a number and a unit" in bad.stderr


def test_hosts_forget_releases_the_name_of_a_host_that_is_gone(
    server_url: str, tmp_path: Path
) -> None:
    def start_agent(state_dir: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                *STRATA,
                "agent",
                "--server",
                server_url,
                "--name",
                "re-imaged",
                "--gpus",
                "1",
                "--workspace",
                str(tmp_path),
                "--state-dir",
                str(state_dir),
            ],
            env={**os.environ, "STRATA_AGENT_TOKEN": AGENT_TOKEN},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def listed() -> bool:
        return " re-imaged " in strata("hosts", url=server_url).stdout

    first = start_agent(tmp_path / "before")
    try:
        wait_until(listed)
        connected = strata("hosts", "forget", "re-imaged", url=server_url)
        assert connected.returncode == 1
        assert "error (409)" in connected.stderr and "stop its agent first" in connected.stderr
    finally:
        stop(first)
    # Gone (its host not yet noticed lost): forget frees the name for the re-imaged machine.
    wait_until(lambda: strata("hosts", "forget", "re-imaged", url=server_url).returncode == 0)
    assert not listed()
    again = strata("hosts", "forget", "re-imaged", url=server_url)
    assert again.returncode == 1 and "host re-imaged does not exist" in again.stderr
    second = start_agent(tmp_path / "after")  # another identity: welcome, not refused
    try:
        wait_until(listed)
        assert second.poll() is None
    finally:
        stop(second)


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.3)
