"""`strata users`, `strata projects`, `--project`, and the first user `strata up` makes."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy.ext.asyncio import AsyncSession

from backend.auth import Principal, TokenKind
from backend.cli.server import first_user_token
from backend.db import create_engine
from backend.teams.access import load_access
from backend.teams.bootstrap import user_name_for
from backend.teams.roles import ProjectRole
from backend.tokens import service as tokens_service
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.cli import run_strata
from tests.support.factories import make_spec
from tests.support.processes import strata_server


@pytest.mark.parametrize(
    ("os_user", "name"),
    [
        ("alice", "alice"),
        ("Jane.Doe", "jane.doe"),
        ("42x y", "x-y"),
        ("DOMAIN\\bob", "domain-bob"),
        ("", "admin"),
        (None, "admin"),
        ("123", "admin"),
    ],
)
def test_the_first_user_is_named_after_the_os_user(os_user: str | None, name: str) -> None:
    assert user_name_for(os_user) == name


def test_up_makes_the_first_user_an_admin_of_default_and_keeps_their_token(
    tmp_path: Path,
) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'strata.db'}", tmp_path / "data")
    user, token = first_user_token(settings, "Alice")
    assert user == "alice" and token.startswith("stk_")
    assert (tmp_path / "data" / "user-token").stat().st_mode & 0o777 == 0o600
    assert first_user_token(settings, "Alice") == (user, token)  # a restart: the same

    async def check() -> None:
        engine = create_engine(settings.resolved_database_url)
        try:
            async with AsyncSession(engine) as session:
                stored = await tokens_service.find_usable(session=session, secret=token)
                assert stored is not None and stored.kind == "user"
                principal = Principal(TokenKind.user, user_id=stored.user_id, user_name=user)
                access = await load_access(session=session, principal=principal)
                assert list(access.roles.values()) == [ProjectRole.admin]
                # A revoked kept token is replaced by a new one.
                await tokens_service.revoke_token(session=session, token_id=stored.id)
                await session.commit()
        finally:
            await engine.dispose()

    asyncio.run(check())
    again, replaced = first_user_token(settings, "Alice")
    assert again == "alice" and replaced != token


TOKENS = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with strata_server(tmp_path_factory.mktemp("teams-cli") / "data", TOKENS) as url:
        yield url


def strata(*args: str, url: str, token: str = ADMIN_TOKEN) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_SERVER": url, "STRATA_TOKEN": token, "COLUMNS": "200"}
    env.pop("STRATA_PROJECT", None)
    return run_strata(args, env)


def run_ok(*args: str, url: str, token: str = ADMIN_TOKEN) -> str:
    result = strata(*args, url=url, token=token)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


@pytest.mark.slow
def test_users_projects_members_and_project_flags(server_url: str, tmp_path: Path) -> None:
    url = server_url
    assert "user ana created" in run_ok("users", "create", "ana", url=url)
    created = run_ok("users", "token", "ana", "--name", "laptop", url=url)
    ana = next(line for line in created.splitlines() if line.startswith("stk_"))
    assert "project vision created" in run_ok("projects", "create", "vision", url=url)
    run_ok("projects", "create", "nlp", url=url)
    added = run_ok("projects", "members", "add", "vision", "ana", "--role", "member", url=url)
    assert "ana is a member of vision" in added
    assert "ana" in run_ok("projects", "members", "ls", "vision", url=url)
    assert "vision" in run_ok("users", "ls", url=url)  # her default project

    mine = run_ok("projects", "ls", url=url, token=ana)
    assert "vision" in mine and "member" in mine and "nlp" not in mine

    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(make_spec()))
    submitted = run_ok("submit", str(spec), "--project", "vision", url=url, token=ana)
    assert "submitted to project vision: pending" in submitted
    job_id = submitted.split()[1]
    shown = run_ok("jobs", "show", job_id, url=url, token=ana)
    assert "project: vision, submitted by ana" in shown
    assert "created" in shown and " ana " in shown  # the event names who submitted it
    refused = strata("submit", str(spec), "--project", "nlp", url=url, token=ana)
    assert refused.returncode == 1 and "no project named nlp" in refused.stderr

    listed = run_ok("jobs", "ls", "--project", "vision", url=url, token=ana)
    assert f" {job_id} " in f" {listed} " and "vision" in listed
    other = strata("jobs", "ls", "--project", "nlp", url=url, token=ana)
    assert other.returncode == 1 and "no project named nlp" in other.stderr
    assert f" {job_id} " not in run_ok("jobs", "ls", "--project", "nlp", url=url)

    # Only a project's admins manage its members.
    refused = strata(
        "projects", "members", "add", "vision", "ana", "--role", "admin", url=url, token=ana
    )
    assert refused.returncode == 1 and "error (403)" in refused.stderr
    assert "ana removed from vision" in run_ok(
        "projects", "members", "remove", "vision", "ana", url=url
    )
    assert f" {job_id} " not in run_ok("jobs", "ls", url=url, token=ana)

    # Disabled, her token is refused; enabled again, it works.
    assert "user ana disabled" in run_ok("users", "disable", "ana", url=url)
    assert "disabled" in run_ok("users", "ls", url=url)
    shut_out = strata("projects", "ls", url=url, token=ana)
    assert shut_out.returncode == 1 and "401" in shut_out.stderr
    assert "user ana enabled" in run_ok("users", "enable", "ana", url=url)
    run_ok("projects", "ls", url=url, token=ana)
