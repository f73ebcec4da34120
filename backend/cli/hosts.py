"""`strata hosts`: list the hosts, drain or cordon one, put it back in service, give notice
that one goes, or forget it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from agents.runtime_environment import EngineInfo
from backend.cli.client import ServerOption, TokenOption, connect, console
from backend.hosts.health import fault_words
from backend.hosts.schemas import HostRead


def hosts(ctx: typer.Context, server: ServerOption = None, token: TokenOption = None) -> None:
    """List the hosts that have joined, with their devices (or forget one)."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(server, token) as client:
        found = client.hosts()
    table = Table("NAME", "ADDRESS", "STATUS", "DEVICES", "ENGINE", "PORTS", "HEARTBEAT", "HEALTH")
    for host in found:
        devices = ", ".join(f"{d.index}:{d.name}" for d in host.devices) or "-"
        low, high = host.port_range
        table.add_row(
            host.name,
            host.address,
            _status_column(host),
            devices,
            _engine_column(host.engine),
            f"{low}-{high}",
            f"{host.heartbeat_age_seconds:.1f}s ago",
            _health_column(host),
        )
    console.print(table)


def _health_column(host: HostRead) -> str:
    """'cordoned: GPU 1: uncorrectable ECC errors (3)', the faults reported since, or '-'."""
    parts = []
    if host.cordon_reason is not None:
        parts.append(f"cordoned ({host.cordon_cause or 'manual'}): {host.cordon_reason}")
    faults = [fault_words(f) for f in host.faults]
    if faults and faults != [host.cordon_reason]:
        parts.append("faults: " + "; ".join(faults))
    if host.warnings:
        parts.append("warnings: " + "; ".join(fault_words(w) for w in host.warnings))
    return escape(" | ".join(parts)) if parts else "-"


def _status_column(host: HostRead) -> str:
    """online; or, once drained, 'draining (3 tasks left)' until it is 'drained'."""
    if host.draining_since is None:
        return host.status.value
    if host.live_tasks:
        return f"{host.status.value}, draining ({host.live_tasks} tasks left)"
    return f"{host.status.value}, drained"


def _engine_column(engine: EngineInfo | None) -> str:
    """'docker 27.3.1 +nvidia', or '-' for a host that runs no image."""
    if engine is None:
        return "-"
    return escape(f"{engine.kind} {engine.version}{' +nvidia' if engine.nvidia else ''}")


def hosts_drain(
    name: Annotated[str, typer.Argument(help="The host's name.")],
    deadline: Annotated[
        float,
        typer.Option(
            min=1,
            max=86400,
            help="Seconds the jobs there may take to checkpoint before they move anyway.",
        ),
    ] = 600.0,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Take a host out of service: no new task goes there, and what runs there moves off
    (checkpointed first). `strata hosts` says when it is drained."""
    with connect(server, token) as client:
        host = client.drain_host(name, deadline_seconds=deadline)
    console.print(f"draining {escape(host.name)}: {_status_column(host)}")


def hosts_undrain(
    name: Annotated[str, typer.Argument(help="The host's name.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Put a drained host back in service."""
    with connect(server, token) as client:
        host = client.undrain_host(name)
    console.print(f"{escape(host.name)} is in service: {_status_column(host)}")


def hosts_notice(
    name: Annotated[str, typer.Argument(help="The host's name.")],
    seconds: Annotated[
        float, typer.Option(min=1, max=3600, help="Seconds until the host goes.")
    ] = 120.0,
    reason: Annotated[
        str | None, typer.Option(help="What gave notice (a spot reclaim), for the job events.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """The host goes in SECONDS (a spot or preemption notice its agent does not see): what
    runs there is checkpointed and moved off before then, as when its agent is stopped."""
    with connect(server, token) as client:
        host = client.host_notice(name, seconds=seconds, reason=reason)
    console.print(f"{escape(host.name)} goes in {seconds:g}s: its jobs are being moved off")


def hosts_cordon(
    name: Annotated[str, typer.Argument(help="The host's name.")],
    reason: Annotated[str, typer.Option(help="Why, shown with the host until it is cleared.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Cordon a host: no new task goes there; what runs there goes on."""
    with connect(server, token) as client:
        host = client.cordon_host(name, reason=reason)
    console.print(f"cordoned {escape(host.name)}: {escape(host.cordon_reason or reason)}")


def hosts_uncordon(
    name: Annotated[str, typer.Argument(help="The host's name.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Clear a host's cordon (an operator's, a fault's or its failures'): it takes tasks
    again. Faults its agent reports now cordon it again only if they change."""
    with connect(server, token) as client:
        host = client.uncordon_host(name)
    console.print(f"{escape(host.name)} takes tasks again")
    if host.faults:
        still = "; ".join(fault_words(f) for f in host.faults)
        console.print(f"acknowledged, still reported: {escape(still)}")


def hosts_forget(
    name: Annotated[str, typer.Argument(help="The host's name.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Forget a host that is gone (re-imaged, retired), freeing its name for a new agent."""
    with connect(server, token) as client:
        host = client.forget_host(name)
    console.print(f"forgot host {escape(host.name)} (last at {escape(host.address)})")


def register(app: typer.Typer) -> None:
    hosts_app = typer.Typer(
        help="List hosts; drain, undrain, cordon, uncordon, give notice for or forget one.",
        invoke_without_command=True,
    )
    hosts_app.callback()(hosts)
    hosts_app.command("drain")(hosts_drain)
    hosts_app.command("undrain")(hosts_undrain)
    hosts_app.command("cordon")(hosts_cordon)
    hosts_app.command("uncordon")(hosts_uncordon)
    hosts_app.command("notice")(hosts_notice)
    hosts_app.command("forget")(hosts_forget)
    app.add_typer(hosts_app, name="hosts")
