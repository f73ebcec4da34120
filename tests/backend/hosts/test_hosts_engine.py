"""What an agent says about its container engine: stored on the host from its hello, shown in
GET /hosts, GET /cluster and `strata hosts`, and cleared when a later hello has none."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from typer.testing import CliRunner

from agents.protocol import Welcome
from agents.runtime_environment import EngineInfo
from backend.cli import app
from backend.cli import hosts as cli_hosts
from backend.hosts.schemas import HostRead
from backend.hosts.states import HostStatus
from tests.backend.api.test_agent_channel import ADMIN, AGENT, hello, receive
from tests.conftest import Api
from tests.support.factories import make_host

DOCKER = EngineInfo(
    version="27.3.1", nvidia=True, images=["tensorflow/tensorflow:2.21.0", "busybox:latest"]
)
SHOWN = {
    "kind": "docker",
    "version": "27.3.1",
    "nvidia": True,
    "images": ["tensorflow/tensorflow:2.21.0", "busybox:latest"],
}


def _join(client: TestClient, name: str, engine: EngineInfo | None) -> None:
    with client.websocket_connect("/agents/connect", headers=AGENT) as ws:
        ws.send_text(hello(name, engine=engine))
        assert isinstance(receive(ws), Welcome)


def test_the_engine_in_a_hello_is_stored_and_shown(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="backend.api.agent_channel"):
        _join(client, "with-docker", DOCKER)
        _join(client, "without", None)
    assert "agent with-docker joined from 10.1.2.3 (container engine docker 27.3.1)" in (
        caplog.text
    )
    assert "agent without joined from 10.1.2.3 (no container engine)" in caplog.text
    hosts = {h["name"]: h for h in client.get("/hosts", headers=ADMIN).json()}
    assert hosts["with-docker"]["engine"] == SHOWN
    assert hosts["without"]["engine"] is None
    cluster = {h["name"]: h for h in client.get("/cluster", headers=ADMIN).json()["hosts"]}
    assert cluster["with-docker"]["engine"] == SHOWN
    assert cluster["without"]["engine"] is None


def test_a_later_hello_replaces_or_clears_the_engine(client: TestClient) -> None:
    _join(client, "agent-1", DOCKER)
    newer = EngineInfo(version="28.0.0")
    _join(client, "agent-1", newer)
    (host,) = client.get("/hosts", headers=ADMIN).json()
    assert host["engine"] == {"kind": "docker", "version": "28.0.0", "nvidia": False, "images": []}
    _join(client, "agent-1", None)  # the engine was removed or stopped
    (host,) = client.get("/hosts", headers=ADMIN).json()
    assert host["engine"] is None


async def test_registered_hosts_keep_the_engine_as_sql_null_when_absent(api: Api) -> None:
    from sqlalchemy import select

    from backend.hosts.models import Host

    async with api.session() as session:
        await make_host(session, "plain")
        await make_host(session, "docker", engine=DOCKER)
        await session.commit()
    async with api.session() as session:
        with_engine = await session.scalars(select(Host.name).where(Host.engine.is_not(None)))
        assert list(with_engine) == ["docker"]


def _host(name: str, engine: EngineInfo | None, **fields: object) -> HostRead:
    now = datetime.now(UTC)
    return HostRead.model_validate(
        dict(
            name=name,
            address="10.0.0.1",
            status=HostStatus.online,
            port_range=(42000, 42099),
            agent_version="test",
            engine=engine,
            devices=[],
            registered_at=now,
            last_heartbeat_at=now,
            heartbeat_age_seconds=1.0,
            **fields,
        )
    )


class FakeClient:
    def hosts(self) -> list[HostRead]:
        return [
            _host("gpu-box", DOCKER),
            _host("cpu-box", EngineInfo(kind="podman", version="5.2[x]")),
            _host("bare-box", None),
            _host("drain-box", None, draining_since=datetime.now(UTC), live_tasks=3),
            _host("done-box", None, draining_since=datetime.now(UTC)),
        ]


def test_strata_hosts_shows_a_short_engine_column(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextmanager
    def connect(_server: str | None, _token: str | None) -> Iterator[FakeClient]:
        yield FakeClient()

    monkeypatch.setattr(cli_hosts, "connect", connect)
    # A console of a known width: the module's own took its width from the environment of the
    # process that imported it, which a test runner's worker may have set.
    monkeypatch.setattr(cli_hosts, "console", Console(width=200))
    result = CliRunner().invoke(app, ["hosts"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[1]: line for line in result.output.splitlines() if "-box" in line}
    assert "ENGINE" in result.output
    assert "docker 27.3.1 +nvidia" in rows["gpu-box"]
    assert "podman 5.2[x]" in rows["cpu-box"]  # the agent's words, never read as markup
    assert "+nvidia" not in rows["cpu-box"]
    assert " - " in rows["bare-box"].replace("│", " ")
    # A drained host says what is left on it, then that it is drained.
    assert "online, draining (3 tasks left)" in rows["drain-box"]
    assert "online, drained" in rows["done-box"]
