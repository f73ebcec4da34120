"""Secrets in files: `strata init-secrets`, the server's *_FILE settings, `agent --token-file`.

This is what lets `docker compose up` start from a fresh clone with no .env.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from backend.config import Settings
from tests.support.processes import STRATA, stop, strata_server

pytestmark = pytest.mark.slow  # the CLI, the server and an agent in subprocesses

REPO = Path(__file__).resolve().parents[3]


def run_strata(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # No STRATA_*/POSTGRES_* of the test run: only what each test gives.
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("STRATA_", "POSTGRES_"))
    }
    return subprocess.run(
        [*STRATA, *args],
        env={**clean, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def read(path: Path) -> str:
    return path.read_text().strip()


def test_init_secrets_makes_them_once_and_keeps_them(tmp_path: Path) -> None:
    server, agents = tmp_path / "server", tmp_path / "agents"
    server.mkdir()
    agents.mkdir()
    args = ("init-secrets", "--dir", str(server), "--agent-dir", str(agents))

    first = run_strata(*args, "--public-url", "http://127.0.0.1:8123/")
    assert first.returncode == 0, first.stderr
    assert "api token created, agent token created, database password created" in first.stdout
    api, agent, password = (
        read(server / name) for name in ("api-token", "agent-token", "database-password")
    )
    assert len({api, agent, password}) == 3 and min(map(len, (api, agent, password))) >= 32
    assert read(agents / "agent-token") == agent
    assert sorted(p.name for p in agents.iterdir()) == ["agent-token"]  # nothing else for agents
    assert mode(server / "api-token") == mode(server / "agent-token") == 0o600
    assert mode(agents / "agent-token") == 0o600
    assert mode(server / "database-password") == 0o644  # the database reads it as its own user
    assert f"Dashboard:   http://127.0.0.1:8123/ui/?token={api}" in first.stdout
    assert f"export STRATA_TOKEN={api}" in first.stdout
    assert "export STRATA_SERVER=http://127.0.0.1:8123\n" in first.stdout

    again = run_strata(*args)
    assert again.returncode == 0, again.stderr
    assert "api token kept, agent token kept, database password kept" in again.stdout
    assert "Dashboard" not in again.stdout  # no --public-url, no login lines
    assert read(server / "api-token") == api

    # Values from .env: tokens follow them (rotation); the database keeps its first password.
    changed = run_strata(
        *args,
        env={
            "STRATA_API_TOKEN": "rotated-admin",
            "STRATA_AGENT_TOKEN": "rotated-agent",
            "POSTGRES_PASSWORD": "another-password",
        },
    )
    assert changed.returncode == 0, changed.stderr
    assert "api token updated, agent token updated, database password kept" in changed.stdout
    assert "POSTGRES_PASSWORD differs from" in changed.stdout
    assert read(server / "api-token") == "rotated-admin"
    assert read(agents / "agent-token") == read(server / "agent-token") == "rotated-agent"
    assert read(server / "database-password") == password
    assert mode(server / "api-token") == 0o600


def test_init_secrets_takes_values_given_at_the_first_start(tmp_path: Path) -> None:
    empty = run_strata(
        "init-secrets",
        "--dir",
        str(tmp_path),
        # Compose passes variables .env does not set as empty strings: random values then.
        env={"STRATA_API_TOKEN": "", "STRATA_AGENT_TOKEN": "", "POSTGRES_PASSWORD": "chosen"},
    )
    assert empty.returncode == 0, empty.stderr
    assert read(tmp_path / "database-password") == "chosen"
    assert read(tmp_path / "api-token") and read(tmp_path / "agent-token")


def test_init_secrets_needs_existing_folders(tmp_path: Path) -> None:
    missing = run_strata("init-secrets", "--dir", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert "nope is not a directory" in missing.stderr


def test_database_password_file_goes_into_the_url(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret/with:odd@chars\n")
    settings = Settings(
        database_url="postgresql://strata@db:5432/strata",
        database_password_file=tmp_path / "pw",
    )
    assert settings.resolved_database_url == (
        "postgresql+asyncpg://strata:s3cret%2Fwith%3Aodd%40chars@db:5432/strata"
    )
    plain = Settings(database_url="postgresql://strata:given@db/strata")
    assert plain.resolved_database_url == "postgresql+asyncpg://strata:given@db/strata"


def test_a_token_given_directly_wins_over_its_file(tmp_path: Path) -> None:
    (tmp_path / "api").write_text("from-file\n")
    from_file = Settings(api_token_file=tmp_path / "api")
    assert from_file.api_token is not None
    assert from_file.api_token.get_secret_value() == "from-file"
    direct = Settings(api_token="direct", api_token_file=tmp_path / "api")
    assert direct.api_token is not None and direct.api_token.get_secret_value() == "direct"


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "cannot read"), ("\n", "is empty")],
)
def test_server_names_an_unusable_token_file(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "api-token"
    if content is not None:
        path.write_text(content)
    result = run_strata(
        "server",
        env={"STRATA_DATA_DIR": str(tmp_path / "data"), "STRATA_API_TOKEN_FILE": str(path)},
    )
    assert result.returncode == 2
    assert f"api_token_file: {path}" in result.stdout or f"cannot read {path}" in result.stdout
    assert expected in result.stdout


def test_server_and_agent_run_on_the_files_alone(tmp_path: Path) -> None:
    secrets_dir, agent_dir = tmp_path / "secrets", tmp_path / "agent-secrets"
    secrets_dir.mkdir()
    agent_dir.mkdir()
    made = run_strata("init-secrets", "--dir", str(secrets_dir), "--agent-dir", str(agent_dir))
    assert made.returncode == 0, made.stderr
    api = read(secrets_dir / "api-token")
    files = {
        "STRATA_API_TOKEN_FILE": str(secrets_dir / "api-token"),
        "STRATA_AGENT_TOKEN_FILE": str(secrets_dir / "agent-token"),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    data = tmp_path / "data"
    data.mkdir()
    with strata_server(data, {**env, **files}) as url:
        assert (
            httpx.get(f"{url}/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        )
        jobs = httpx.get(f"{url}/jobs", headers={"Authorization": f"Bearer {api}"})
        assert jobs.status_code == 200, jobs.text

        log = (tmp_path / "agent.log").open("wb")
        agent = subprocess.Popen(
            [
                *STRATA,
                "agent",
                "--server",
                url,
                "--name",
                "from-file",
                "--gpus",
                "1",
                "--token-file",
                str(agent_dir / "agent-token"),
                "--workspace",
                str(REPO),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                hosts = httpx.get(f"{url}/hosts", headers={"Authorization": f"Bearer {api}"}).json()
                if any(h["name"] == "from-file" and h["status"] == "online" for h in hosts):
                    break
                assert agent.poll() is None, (tmp_path / "agent.log").read_text()
                assert time.monotonic() < deadline, hosts
                time.sleep(0.3)
        finally:
            stop(agent)
            log.close()


def test_agent_needs_exactly_one_token_source(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t\n")
    base = ("agent", "--server", "http://127.0.0.1:9", "--workspace", str(tmp_path))
    neither = run_strata(*base)
    assert neither.returncode == 2
    assert "--token-file" in neither.stderr and "join token" in neither.stderr
    both = run_strata(*base, "--token", "t", "--token-file", str(tmp_path / "token"))
    assert both.returncode == 2 and "not both" in both.stderr
    unreadable = run_strata(*base, "--token-file", str(tmp_path / "missing"))
    assert unreadable.returncode == 2 and "cannot read" in unreadable.stderr
