"""`strata init-secrets`: the cluster's tokens and database password, made once, kept in files.

`docker compose up` runs it before anything else, so a fresh clone needs no `.env`: what is not
given in the environment is generated on the first start and read from the files afterwards.
The server reads them through STRATA_*_FILE settings, the agents through --token-file and the
database through POSTGRES_PASSWORD_FILE, so no secret sits in an image or in `docker inspect`.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()


@dataclass(frozen=True)
class Secret:
    file: str
    env: str  # where a value given by the user (e.g. from .env) comes from
    mode: int
    # Tokens follow the environment when it changes (that is how one rotates them); the
    # database password cannot, because PostgreSQL keeps the one it was initialised with.
    follows_env: bool


API_TOKEN = Secret("api-token", "STRATA_API_TOKEN", 0o600, follows_env=True)
AGENT_TOKEN = Secret("agent-token", "STRATA_AGENT_TOKEN", 0o600, follows_env=True)
# Readable by others: the database reads it as its own user, in its own container. The
# directory is only mounted where the server's secrets belong (never on an agent).
DATABASE_PASSWORD = Secret("database-password", "POSTGRES_PASSWORD", 0o644, follows_env=False)


def ensure_secret(directory: Path, secret: Secret, given: str | None) -> tuple[str, str]:
    """The secret's value and what happened to its file: created, updated or kept."""
    path = directory / secret.file
    current = path.read_text().strip() if path.exists() else None
    if current and (given is None or given == current):
        return current, "kept"
    if current and not secret.follows_env:
        console.print(
            f"[yellow]warning:[/yellow] {secret.env} differs from {path}, which keeps the value "
            "the database was created with; change the password in the database first"
        )
        return current, "kept"
    value = given or secrets.token_urlsafe(24)
    write_secret(path, value, secret.mode)
    return value, "updated" if current else "created"


def write_secret(path: Path, value: str, mode: int) -> None:
    """Replace the file in one step, so that a reader sees the old value or the new one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    os.chmod(partial, mode)  # the umask may have taken bits away
    partial.replace(path)


def _given(env: str) -> str | None:
    # Compose passes unset .env values through as empty strings.
    return os.environ.get(env) or None


def init_secrets(
    directory: Annotated[
        Path,
        typer.Option(
            "--dir", help="Where the server's secrets live (the server reads them from here)."
        ),
    ],
    agent_dir: Annotated[
        Path | None,
        typer.Option(help="Also put the agent token alone here, for the agents to mount."),
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(help="Where users reach the server; prints how to log in there."),
    ] = None,
) -> None:
    """Create the API token, agent token and database password unless they exist.

    Values set in STRATA_API_TOKEN, STRATA_AGENT_TOKEN and POSTGRES_PASSWORD are used
    instead of random ones (a changed token replaces the stored one).
    """
    for folder in (directory, agent_dir):
        if folder is not None and not folder.is_dir():
            raise typer.BadParameter(f"{folder} is not a directory")
    api_token, api_state = ensure_secret(directory, API_TOKEN, _given(API_TOKEN.env))
    agent_token, agent_state = ensure_secret(directory, AGENT_TOKEN, _given(AGENT_TOKEN.env))
    _, password_state = ensure_secret(directory, DATABASE_PASSWORD, _given(DATABASE_PASSWORD.env))
    if agent_dir is not None:
        path = agent_dir / AGENT_TOKEN.file
        if not path.exists() or path.read_text().strip() != agent_token:
            write_secret(path, agent_token, AGENT_TOKEN.mode)
    console.print(
        f"secrets in {directory}: api token {api_state}, agent token {agent_state}, "
        f"database password {password_state}",
        soft_wrap=True,
    )
    if public_url is not None:
        url = public_url.rstrip("/")
        console.print(f"  Dashboard:   {url}/ui/?token={api_token}", soft_wrap=True)
        console.print(f"  export STRATA_SERVER={url}", soft_wrap=True)
        console.print(f"  export STRATA_TOKEN={api_token}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("init-secrets")(init_secrets)
