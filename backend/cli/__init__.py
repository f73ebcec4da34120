"""The `strata` command: server-side commands and client commands in one tool."""

from __future__ import annotations

import typer

from backend.cli import agent, client, secrets, server, tokens

app = typer.Typer(
    name="strata",
    help="Run distributed TensorFlow training jobs on a fleet of hosts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
server.register(app)
agent.register(app)
secrets.register(app)
client.register(app)
tokens.register(app)


def main() -> None:
    app()
