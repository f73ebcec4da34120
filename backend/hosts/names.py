"""One name, one host: whether an agent's hello may take a host's name.

The decision is made here and nowhere else; the agent channel asks before attaching, the hub
at the attach, and register_host under the controller's lock, each with what it can see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from backend.hosts.states import HostStatus

if TYPE_CHECKING:
    from backend.hosts.models import Host


class NameClash(Exception):
    """A hello under a host's name from an agent with another identity, while the host is
    online: another machine. The message says so, for the refused agent to print."""


class Connected(Protocol):
    """The agent connected under a name, as far as the decision needs it."""

    identity: str | None
    address: str


def admit_hello(
    name: str,
    identity: str | None,
    *,
    connected: Connected | None = None,
    host: Host | None = None,
) -> str | None:
    """Why a hello under `name` with `identity` may not take the name, or None if it may.

    `connected`: the agent connected under the name now, if any: another identity holds it.
    `host`: the host's row, if any. Its name is held by the identity that last joined under it
    for as long as the host is online, connected or not yet noticed gone, so that a second
    machine cannot slip in while the first reconnects. A lost host's name is free again;
    `strata hosts forget` frees it at once.
    """
    if connected is not None and connected.identity != identity:
        return (
            f"{name} is already connected from {connected.address} with another identity; "
            "start this agent with another --name"
        )
    if host is None or host.identity is None or host.identity == identity:
        return None
    if host.status is not HostStatus.online:
        return None
    return (
        f"{host.name} is online from {host.address} with another identity; start this "
        f"agent with another --name (or, if that host is gone, strata hosts forget {host.name})"
    )
