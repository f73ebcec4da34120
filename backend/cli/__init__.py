"""The `strata` command: server-side commands and client commands in one tool."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from agents.tls import CA_FILE_ENV
from backend.cli import agent, client, hosts, secrets, server, sweeps, teams, tokens

app = typer.Typer(
    name="strata",
    help="Run distributed TensorFlow training jobs on a fleet of hosts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def main_options(
    ca_file: Annotated[
        Path | None,
        typer.Option(
            "--ca-file",
            envvar=CA_FILE_ENV,
            help="Trust an https:// server whose certificate this CA file (PEM) signed.",
        ),
    ] = None,
) -> None:
    """Run distributed TensorFlow training jobs on a fleet of hosts."""
    if ca_file is not None:
        if not ca_file.is_file():
            raise typer.BadParameter(f"{ca_file} is not a file", param_hint="--ca-file")
        # The one place every client reads it from (REST, the job stream, an agent's tasks).
        os.environ[CA_FILE_ENV] = str(ca_file.resolve())


server.register(app)
agent.register(app)
secrets.register(app)
client.register(app)
hosts.register(app)
tokens.register(app)
teams.register(app)
sweeps.register(app)


def main() -> None:
    app()
