"""`strata agent`: join a host to a server and run the tasks placed on it."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Annotated

import typer

from agents.host.bundles import DEFAULT_CACHE_BYTES
from agents.host.ports import CPU_TASK_PORTS, NoFreePorts, default_lock_dir
from agents.memory_size import format_memory, parse_memory
from backend.config import LOG_LEVELS, read_secret_file

# The server's levels but uvicorn's "trace", which Python's logging does not know by itself.
AGENT_LOG_LEVELS = tuple(level for level in LOG_LEVELS if level != "trace")


def agent(
    server: Annotated[str, typer.Option(envvar="STRATA_SERVER", help="Server URL.")],
    token: Annotated[
        str | None,
        typer.Option(envvar="STRATA_AGENT_TOKEN", help="Agent join token.", show_default=False),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="STRATA_AGENT_TOKEN_FILE",
            help="A file holding the join token (instead of --token).",
            show_default=False,
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Host name (default: hostname).")] = None,
    address: Annotated[
        str | None, typer.Option(help="Address other hosts reach this host's tasks at.")
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(min=0, max=64, help="Declare N simulated GPUs (default: NVML discovery)."),
    ] = None,
    port_range: Annotated[
        str,
        typer.Option(
            help="Where this agent claims ports for its tasks; keep it below the kernel's "
            "ephemeral range (32768-60999 on Linux) so no outgoing connection can be holding "
            "one. Agents on one machine may share a range: each claims its own block of it."
        ),
    ] = "20000-20999",
    ports: Annotated[
        int | None,
        typer.Option(
            envvar="STRATA_AGENT_PORTS",
            min=1,
            max=64512,
            help="How many ports to claim in --port-range: consecutive ones that no other "
            "agent on this machine holds and nothing listens on, held while the agent runs "
            f"(fewer if fewer are free). Default: two per GPU plus {CPU_TASK_PORTS}.",
            show_default=False,
        ),
    ] = None,
    port_lock_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="STRATA_AGENT_PORT_LOCK_DIR",
            help="The machine-wide directory of the agents' port locks (one file per port); "
            f"every agent on the machine must use the same one. Default: {default_lock_dir()}.",
            show_default=False,
        ),
    ] = None,
    workspace: Annotated[
        Path, typer.Option(help="Jobs' working_dir resolves under this directory.")
    ] = Path(),
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="STRATA_AGENT_STATE_DIR",
            help="Where the agent keeps its identity (made on the first start; the server "
            "lets one identity at a time use a name). Default: "
            "$XDG_STATE_HOME/strata/agent-NAME (~/.local/state/strata/agent-NAME).",
            show_default=False,
        ),
    ] = None,
    ca_file: Annotated[
        Path | None,
        typer.Option(
            envvar="STRATA_CA_FILE",
            help="Trust an https:// server whose certificate this CA file (PEM) signed; "
            "the tasks it starts get it too.",
        ),
    ] = None,
    bundle_cache_bytes: Annotated[
        str,
        typer.Option(
            envvar="STRATA_AGENT_BUNDLE_CACHE_BYTES",
            help="How much unpacked code bundles the agent keeps under "
            "<workspace>/.strata-bundles, least recently used evicted first (bundles in use "
            "are kept even over it): bytes, or a size like 2GiB or 500MB.",
        ),
    ] = format_memory(DEFAULT_CACHE_BYTES).replace(" ", ""),
    warm_pool: Annotated[
        int | None,
        typer.Option(
            envvar="STRATA_AGENT_WARM_POOL",
            min=0,
            max=64,
            help="Warm processes to keep: Python with TensorFlow already imported, each taken "
            "by one task start (0: every task starts cold). Default: one per GPU plus one.",
            show_default=False,
        ),
    ] = None,
    warm_pool_memory: Annotated[
        str | None,
        typer.Option(
            envvar="STRATA_AGENT_WARM_POOL_MEMORY",
            help="The most resident memory idle warm processes may hold together (measured): "
            "bytes, or a size like 4GiB. Default: a quarter of the host's memory.",
            show_default=False,
        ),
    ] = None,
    notice: Annotated[
        float,
        typer.Option(
            envvar="STRATA_AGENT_NOTICE",
            min=0,
            max=3600,
            help="Seconds the server gets, after the agent is told to stop (SIGTERM), to "
            "checkpoint this host's tasks and move them (an interruption, not a failure) "
            "before the agent stops them itself; keep it under what the agent is given "
            "before SIGKILL (Slurm's KillWait, or GraceTime with preemption). 0: none.",
        ),
    ] = 20.0,
    min_free_disk: Annotated[
        str,
        typer.Option(
            envvar="STRATA_AGENT_MIN_FREE_DISK",
            help="The least free space under the workspace and the checkpoint directories of "
            "this host's tasks: less is a fault, and the server takes the host out of service "
            "(cordons it). A size like 1GiB, or a share of the disk like 2%.",
        ),
    ] = "1GiB",
    log_level: Annotated[
        str, typer.Option(help="How much the agent logs: " + ", ".join(AGENT_LOG_LEVELS) + ".")
    ] = "info",
) -> None:
    """Run a host agent: it joins the server and runs the tasks placed on this host."""
    # Here rather than at the top: every `strata` command loads this module.
    from agents.host.agent import Agent, AgentConfig, default_address, parse_port_range
    from agents.host.health import FreeSpaceLimit
    from agents.host.identity import StateDirError

    if log_level.lower() not in AGENT_LOG_LEVELS:
        raise typer.BadParameter(
            f"{log_level!r} is not one of {', '.join(AGENT_LOG_LEVELS)}", param_hint="--log-level"
        )
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s agent %(levelname)s %(message)s"
    )
    try:
        port_span = parse_port_range(port_range)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--port-range") from None
    cache_bytes = parse_bundle_cache_bytes(bundle_cache_bytes)
    try:
        free_limit = FreeSpaceLimit.parse(min_free_disk)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--min-free-disk") from None
    join_token = _join_token(token, token_file)
    if not workspace.is_dir():
        raise typer.BadParameter(f"{workspace} is not a directory", param_hint="--workspace")
    config = AgentConfig(
        server_url=server,
        token=join_token,
        name=name or socket.gethostname(),
        address=address or default_address(server),
        port_range=port_span,
        ports=ports,
        port_lock_dir=port_lock_dir,
        workspace=workspace.resolve(),
        gpus=gpus,
        ca_file=None if ca_file is None else str(ca_file.resolve()),
        state_dir=None if state_dir is None else state_dir.resolve(),
        bundle_cache_bytes=cache_bytes,
        warm_pool=warm_pool,
        notice_seconds=notice,
        min_free_disk=free_limit,
        warm_pool_memory=None
        if warm_pool_memory is None
        else parse_warm_pool_memory(warm_pool_memory),
    )
    try:
        running = Agent(config)
    except ValueError as exc:  # an unusable CA file, a server URL that is not http(s)
        raise typer.BadParameter(str(exc)) from None
    except (StateDirError, NoFreePorts) as exc:
        raise SystemExit(f"strata agent: {exc}") from None
    asyncio.run(running.run())


def _positive_size(text: str, flag: str, if_zero: str) -> int:
    """A size flag's value in bytes ("4GiB", "500MB", "1048576"); 0 is refused with `if_zero`."""
    try:
        size = parse_memory(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from None
    if size <= 0:
        raise typer.BadParameter(f"{text!r} {if_zero}", param_hint=flag)
    return size


def parse_bundle_cache_bytes(text: str) -> int:
    """The --bundle-cache-bytes value in bytes: a positive size."""
    return _positive_size(
        text,
        "--bundle-cache-bytes",
        "is no room at all: the bundle cache needs a size above 0, like 4GiB",
    )


def parse_warm_pool_memory(text: str) -> int:
    """The --warm-pool-memory value in bytes: a positive size."""
    return _positive_size(
        text,
        "--warm-pool-memory",
        "holds no warm process: give a size above 0, or --warm-pool 0",
    )


def _join_token(token: str | None, token_file: Path | None) -> str:
    if token and token_file is not None:
        raise typer.BadParameter(
            "give the join token once: --token (STRATA_AGENT_TOKEN) or --token-file "
            "(STRATA_AGENT_TOKEN_FILE), not both",
            param_hint="--token-file",
        )
    if token:
        return token
    if token_file is None:
        raise typer.BadParameter(
            "the agent needs the server's join token: --token (STRATA_AGENT_TOKEN) or "
            "--token-file (STRATA_AGENT_TOKEN_FILE)",
            param_hint="--token",
        )
    try:
        return read_secret_file(token_file, "--token-file")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--token-file") from None


def register(app: typer.Typer) -> None:
    app.command()(agent)
