"""Server-side commands: `strata server`, `strata up`, `strata db upgrade`.

The server's modules are imported inside the commands that run it: every `strata` command loads
this module, and a client command should not pay for loading the server.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import secrets
from pathlib import Path
from typing import Annotated

import typer
from pydantic import SecretStr, ValidationError
from rich.console import Console

from backend.config import Settings

console = Console()
# EX_TEMPFAIL: a replica superseded by another stops, for its supervisor to start it again.
SUPERSEDED_EXIT = 75

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="Database URL (sqlite:///... or postgresql://...).", show_default=False
    ),
]
DataDirOption = Annotated[
    Path | None, typer.Option("--data-dir", help="Logs, checkpoints and the SQLite file.")
]


def _settings(**overrides: object) -> Settings:
    """Environment settings, with the command line's explicit options on top."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            console.print(
                f"[red]error:[/red] {where + ': ' if where else ''}{message}", soft_wrap=True
            )
        raise typer.Exit(2) from None


def _serve(settings: Settings) -> None:
    import uvicorn

    from backend.app import create_app
    from backend.cli.collector import settle_for_serving
    from backend.cli.server_logging import server_log_config

    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=server_log_config(settings.log_level, access_log=settings.access_log),
        access_log=settings.access_log,
        ws="websockets-sansio",
        ssl_certfile=settings.tls_certfile,
        ssl_keyfile=settings.tls_keyfile,
    )
    settle_for_serving()
    server = uvicorn.Server(config)
    superseded: list[str] = []

    def stop_superseded(why: str) -> None:
        superseded.append(why)
        server.should_exit = True  # a graceful stop: connections close, locks are released

    app.state.stop_superseded = stop_superseded
    server.run()
    if superseded:
        console.print(
            f"[yellow]stopped:[/yellow] another replica led after this one ({superseded[0]}); "
            "start it again to follow (exit status 75)"
        )
        raise typer.Exit(SUPERSEDED_EXIT)


def server(
    host: Annotated[str | None, typer.Option(help="Address to bind.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to bind.")] = None,
    db: DbOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Run the control plane server (settings from STRATA_* environment variables)."""
    settings = _settings(host=host, port=port, database_url=db, data_dir=data_dir)
    if settings.api_token is None or settings.agent_token is None:
        console.print(
            "[red]error:[/red] set STRATA_API_TOKEN and STRATA_AGENT_TOKEN, or "
            "STRATA_API_TOKEN_FILE and STRATA_AGENT_TOKEN_FILE (`strata init-secrets` makes "
            "those files; `strata up` makes its own tokens)"
        )
        raise typer.Exit(2)
    _serve(settings)


def load_or_create_tokens(data_dir: Path) -> dict[str, str]:
    """The tokens `strata up` uses, kept in the data dir so that a restart keeps them."""
    path = data_dir / "tokens.json"
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        return stored
    tokens = {"api": secrets.token_urlsafe(24), "agent": secrets.token_urlsafe(24)}
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(tokens, handle)
    return tokens


def first_user_token(settings: Settings, os_user: str | None) -> tuple[str, str]:
    """`strata up`'s first user (named after the OS user, admin of project `default`) and a
    token of theirs: the one kept in the data dir while the server still takes it, else a
    new one, kept there for the next run."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from backend import session_hooks
    from backend.db import create_engine
    from backend.migrate import upgrade_database
    from backend.teams.bootstrap import first_user, user_name_for
    from backend.tokens import service as tokens_service

    path = settings.data_dir / "user-token"
    name = user_name_for(os_user)

    async def run() -> tuple[str, str]:
        session_hooks.install()
        engine = create_engine(settings.resolved_database_url)
        try:
            await upgrade_database(engine)
            async with AsyncSession(engine, expire_on_commit=False) as session:
                user = await first_user(session=session, name=name)
                kept = path.read_text().strip() if path.exists() else ""
                stored = (
                    await tokens_service.find_usable(session=session, secret=kept) if kept else None
                )
                if stored is not None and stored.user_id == user.id:
                    await session.commit()
                    return user.name, kept
                created = await tokens_service.create_token(
                    session=session,
                    name="strata-up",
                    kind="user",
                    expires_in_seconds=None,
                    user=user,
                )
                await session.commit()
        finally:
            await engine.dispose()
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(created.token)
        return user.name, created.token

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(run())


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return None


def up_settings(*, port: int | None, db: str | None, data_dir: Path | None) -> Settings:
    """`strata up`'s settings: the environment's, under the options given on the command line
    (so STRATA_PORT and STRATA_DATA_DIR count, and a flag wins over them), with the
    environment's tokens, else those kept in the data dir (made on the first run)."""
    env = _settings(port=port, database_url=db, data_dir=data_dir)
    if env.tls_certfile is not None or env.tls_keyfile is not None:
        # Serving them would leave its own agents, the demo and the printed links unable to
        # connect unless the certificate names this address and they trust its CA: say so.
        console.print(
            "[red]error:[/red] `strata up` serves plain HTTP, for this machine; "
            "STRATA_TLS_CERTFILE and STRATA_TLS_KEYFILE are for `strata server`. Unset them, "
            "or run `strata server` with them and `strata agent --ca-file` for TLS.",
            soft_wrap=True,
        )
        raise typer.Exit(2)
    stored = load_or_create_tokens(env.data_dir)
    return _settings(
        port=port,
        database_url=db,
        data_dir=data_dir,
        api_token=env.api_token or SecretStr(stored["api"]),
        agent_token=env.agent_token or SecretStr(stored["agent"]),
    )


def up(
    agents: Annotated[int, typer.Option(min=0, max=16, help="Local agents to start.")] = 2,
    gpus_per_agent: Annotated[
        int, typer.Option(min=0, max=16, help="Simulated GPUs each local agent declares.")
    ] = 2,
    port: Annotated[
        int | None,
        typer.Option(help="Port for the API and dashboard. [default: STRATA_PORT, else 8000]"),
    ] = None,
    db: DbOption = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir", help="Where state lives. [default: STRATA_DATA_DIR, else ~/.strata]"
        ),
    ] = None,
    workspace: Annotated[
        Path, typer.Option(help="Jobs' working_dir resolves under this directory.")
    ] = Path(),
    demo: Annotated[
        bool, typer.Option("--demo", help="Also submit the parameter_server example.")
    ] = False,
    warm_pool: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=64,
            help="Warm processes (TensorFlow already imported) each local agent keeps for task "
            "starts; 0: all cold. [default: STRATA_AGENT_WARM_POOL, else one per GPU plus one]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the whole control plane on this machine: server and local agents, SQLite by default."""
    settings = up_settings(port=port, db=db, data_dir=data_dir)
    assert settings.api_token is not None
    api_token, data_dir = settings.api_token, settings.data_dir
    from backend.cli.local import LocalCluster

    local = LocalCluster(
        settings=settings,
        agents=agents,
        gpus_per_agent=gpus_per_agent,
        workspace=workspace.resolve(),
        demo=demo,
        warm_pool=warm_pool,
    )
    url = local.url
    user, user_token = first_user_token(settings, _os_user())
    console.print(f"[bold]Strata[/bold] on {url}  (data: {data_dir})")
    console.print(f"  Dashboard:   {url}/ui/?token={api_token.get_secret_value()}")
    console.print(f"  API docs:    {url}/docs")
    console.print(f"  export STRATA_SERVER={url}")
    console.print(f"  export STRATA_TOKEN={api_token.get_secret_value()}")
    console.print(
        f"  User {user} (admin of project default): export STRATA_TOKEN={user_token}",
        soft_wrap=True,
    )
    console.print(
        f"  {agents} local agent(s) with {gpus_per_agent} simulated GPU(s) each; "
        f"logs in {data_dir / 'agents'}"
    )
    console.print("  Ctrl-C stops everything.")
    asyncio.run(local.run())


def db_upgrade(db: DbOption = None, data_dir: DataDirOption = None) -> None:
    """Apply the database migrations (the server also does this when it starts)."""
    settings = _settings(database_url=db, data_dir=data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    from backend.db import create_engine
    from backend.migrate import upgrade_database

    async def run() -> None:
        engine = create_engine(settings.resolved_database_url)
        try:
            await upgrade_database(engine)
        finally:
            await engine.dispose()

    asyncio.run(run())
    console.print("database is up to date")


def register(app: typer.Typer) -> None:
    app.command()(server)
    app.command()(up)
    db = typer.Typer(help="Database maintenance.", no_args_is_help=True)
    db.command("upgrade")(db_upgrade)
    app.add_typer(db, name="db")
