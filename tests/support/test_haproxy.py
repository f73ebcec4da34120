"""The tests' load balancer, a real HAProxy over two stand-in replicas: requests and websockets
are spread over both, and once one replica dies every request still succeeds on the other."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import httpx
import pytest
from websockets.http11 import Request, Response
from websockets.sync.client import connect
from websockets.sync.server import Server, ServerConnection, serve

from tests.support.haproxy import CHECK_INTERVAL_MS, config_text, load_balancer


class Replica:
    """A websocket server that answers `GET /healthz` and names itself on either."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.server: Server = serve(
            self._talk, "127.0.0.1", 0, process_request=self._http, compression=None
        )
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        host, port = self.server.socket.getsockname()[:2]
        return f"{host}:{port}"

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return None
        return connection.respond(HTTPStatus.OK, self.name)

    def _talk(self, ws: ServerConnection) -> None:
        for message in ws:
            text = message if isinstance(message, str) else message.decode()
            ws.send(f"{self.name}: {text}")

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    started = [Replica("a"), Replica("b")]
    yield started
    for replica in started:
        replica.stop()


def test_the_configuration_names_every_backend_and_checks_healthz() -> None:
    text = config_text(8000, ["127.0.0.1:9001", "127.0.0.1:9002"])
    assert "bind 127.0.0.1:8000" in text
    assert "server replica0 127.0.0.1:9001 check" in text
    assert "server replica1 127.0.0.1:9002 check" in text
    assert "option httpchk GET /healthz" in text
    assert "option redispatch" in text


def test_requests_and_websockets_reach_both_replicas_and_survive_one_dying(
    replicas: list[Replica], tmp_path: Path
) -> None:
    with load_balancer([r.address for r in replicas], tmp_path) as balancer:
        answered = {httpx.get(f"{balancer.url}/healthz").text for _ in range(6)}
        assert answered == {"a", "b"}
        ws_url = balancer.url.replace("http://", "ws://") + "/stream"
        echoed = set()
        for _ in range(4):
            with connect(ws_url, proxy=None) as ws:
                ws.send("hi")
                echoed.add(ws.recv(timeout=5))
        assert echoed == {"a: hi", "b: hi"}

        replicas[0].stop()
        # Within a few checks HAProxy has taken it out; until then a connect that fails is
        # tried again on the other replica: no request fails either way.
        for _ in range(2 * 2000 // CHECK_INTERVAL_MS):
            response = httpx.get(f"{balancer.url}/healthz")
            assert (response.status_code, response.text) == (200, "b")
