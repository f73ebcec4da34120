"""`strata tokens`: create, list and revoke the tokens the server stores (hashed)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

from backend.cli.client import ServerOption, TokenOption, connect, console

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_duration(text: str) -> int:
    """'90m', '12h', '30d' → seconds."""
    found = _DURATION.match(text.strip())
    if not found:
        raise typer.BadParameter(
            f"expected a number and a unit (s, m, h or d), e.g. 30d, got {text!r}",
            param_hint="--expires",
        )
    return int(found[1]) * _UNIT_SECONDS[found[2]]


def _timestamp(at: datetime) -> str:
    """To the second, as the server sends it (in UTC): 2026-11-23T19:20:31."""
    return at.strftime("%Y-%m-%dT%H:%M:%S")


def create(
    name: Annotated[str, typer.Argument(help="Who or what holds it, e.g. grafana or alice.")],
    kind: Annotated[
        str, typer.Option(help="viewer (read only), admin, or agent (joins hosts).")
    ] = "viewer",
    expires: Annotated[
        str | None, typer.Option(help="Refused after this long: 90m, 12h, 30d.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Create a token; its secret is printed once (the server keeps only a hash)."""
    seconds = None if expires is None else parse_duration(expires)
    with connect(server, token) as client:
        created = client.create_token(name, kind, seconds)
    console.print(f"token {created.id} ({created.name}, {created.kind}) created")
    console.print(created.token, soft_wrap=True, markup=False)
    console.print("  it is shown only now: keep it somewhere safe")


def ls(server: ServerOption = None, token: TokenOption = None) -> None:
    """List the stored tokens (never their secrets)."""
    with connect(server, token) as client:
        found = client.tokens()
    table = Table("ID", "NAME", "KIND", "PREFIX", "CREATED", "EXPIRES", "STATE")
    for item in found:
        state = "revoked" if item.revoked_at else ("active" if item.active else "expired")
        table.add_row(
            str(item.id),
            item.name,
            item.kind,
            item.prefix + "…",
            _timestamp(item.created_at),
            _timestamp(item.expires_at) if item.expires_at else "never",
            state,
        )
    console.print(table)


def revoke(
    token_id: Annotated[int, typer.Argument(help="The token's id (strata tokens ls).")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Revoke a token: the server refuses it from the next request on."""
    with connect(server, token) as client:
        revoked = client.revoke_token(token_id)
    console.print(f"token {revoked.id} ({revoked.name}) revoked")


def register(app: typer.Typer) -> None:
    tokens = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)
    tokens.command("create")(create)
    tokens.command("ls")(ls)
    tokens.command("revoke")(revoke)
    app.add_typer(tokens, name="tokens")
