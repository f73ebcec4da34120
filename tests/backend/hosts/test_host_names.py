"""One name, one host: the one decision every check of a hello's name asks."""

from __future__ import annotations

from dataclasses import dataclass

from backend.hosts.models import Host
from backend.hosts.names import admit_hello
from backend.hosts.states import HostStatus

MINE, OTHER = "identity-of-the-first", "identity-of-a-clone"


@dataclass
class Agent:
    identity: str | None
    address: str = "10.0.0.5"


def row(identity: str | None, status: HostStatus = HostStatus.online) -> Host:
    return Host(name="host-a", address="10.0.0.5", identity=identity, status=status)


def test_a_name_is_free_to_its_own_identity_and_where_no_one_holds_it() -> None:
    assert admit_hello("host-a", MINE) is None
    assert admit_hello("host-a", MINE, connected=Agent(MINE), host=row(MINE)) is None
    assert admit_hello("host-a", OTHER, host=row(None)) is None  # no identity recorded
    assert admit_hello("host-a", OTHER, host=row(MINE, HostStatus.lost)) is None


def test_another_identity_connected_under_the_name_is_refused_first() -> None:
    clash = admit_hello("host-a", OTHER, connected=Agent(MINE), host=row(MINE))
    assert clash == (
        "host-a is already connected from 10.0.0.5 with another identity; "
        "start this agent with another --name"
    )


def test_an_online_host_of_another_identity_is_refused() -> None:
    assert admit_hello("host-a", OTHER, host=row(MINE)) == (
        "host-a is online from 10.0.0.5 with another identity; start this agent with another "
        "--name (or, if that host is gone, strata hosts forget host-a)"
    )
