"""A follower forwards to the leader (backend.api.forwarding): real servers on loopback ports.

The "leader" is a small Starlette app under uvicorn in a thread, recording what reaches it;
the follower is `LeaderForwarding` in front of another small app, under uvicorn too, with a
lease the test sets by hand (who leads, where). Clients are httpx and the `websockets` client,
over real sockets. The leader that goes away under a websocket is a process of its own, killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest
import uvicorn
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from backend.api.forwarding import Forwarder, LeaderForwarding, forwarder
from tests.support.postgres import free_port

REPLICA = "f0f0f0f0f0f0f0f0"  # the follower's replica id
# What replicas and clients rely on, spelt out rather than imported: the forwarding header,
# and the close codes "try again later" (nobody leads) and "service restart" (leader gone).
FORWARDED_BY = "x-strata-forwarded-by"
TRY_AGAIN_LATER = 1013
SERVICE_RESTART = 1012
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@dataclass
class HandLease:
    """A lease the test sets: whether this replica leads, and where the leader is."""

    replica: str = REPLICA
    changes: int = 0
    is_leader: bool = False
    epoch: int | None = None
    leader_url: str | None = None

    async def fence(self, session: AsyncSession) -> None:
        return None


@contextlib.contextmanager
def served(app: ASGIApp, port: int | None = None) -> Iterator[str]:
    """`app` under uvicorn on a loopback port (`port`, or a free one), in a thread; yields its
    URL."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # uvicorn offers a flag, not an event to wait on
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


# --- the leader ---------------------------------------------------------------------------


@dataclass
class Leader:
    url: str
    requests: list[str] = field(default_factory=list)  # the paths of HTTP requests, in order
    ws_closes: list[tuple[int, str]] = field(default_factory=list)  # clients' close frames
    stream_gate: threading.Event = field(default_factory=threading.Event)


def leader_app(leader: Leader) -> Starlette:
    async def echo(request: Request) -> Response:
        leader.requests.append(request.url.path)
        body = await request.body()
        answer = JSONResponse(
            {
                "served_by": "leader",
                "method": request.method,
                "path": request.url.path,
                "raw_path": request.scope["raw_path"].decode(),
                "query": request.scope["query_string"].decode(),
                "body": body.decode(),
                "headers": [[k.decode(), v.decode()] for k, v in request.scope["headers"]],
            },
            status_code=int(request.query_params.get("status", "200")),
        )
        answer.headers["x-leader"] = "yes"
        answer.raw_headers.append((b"set-cookie", b"a=1"))
        answer.raw_headers.append((b"set-cookie", b"b=2"))
        return answer

    async def redirect(request: Request) -> Response:
        leader.requests.append(request.url.path)
        return Response(status_code=307, headers={"location": "/elsewhere"})

    async def stream(request: Request) -> Response:
        leader.requests.append(request.url.path)

        async def chunks() -> AsyncIterator[bytes]:
            yield b"first\n"
            deadline = time.monotonic() + 10
            # The second only once the client has read the first: a follower that buffered the
            # response would never pass the first on.
            while not leader.stream_gate.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            yield b"second\n"

        return StreamingResponse(chunks(), media_type="text/plain", headers={"x-leader": "yes"})

    async def ws_echo(websocket: WebSocket) -> None:
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(subprotocol=offered[0] if offered else None)
        # First, what arrived: the forwarding header, the path and query.
        await websocket.send_json(
            {
                "forwarded_by": websocket.headers.get(FORWARDED_BY),
                "authorization": websocket.headers.get("authorization"),
                "path": websocket.url.path,
                "query": websocket.scope["query_string"].decode(),
            }
        )
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                leader.ws_closes.append((message.get("code", 1005), message.get("reason") or ""))
                return
            text = message.get("text")
            if text is not None and text.startswith("close "):
                _, code, reason = text.split(" ", 2)
                await websocket.close(int(code), reason)
                return
            if text is not None:
                await websocket.send_text(text)
            else:
                await websocket.send_bytes(message["bytes"])

    return Starlette(
        routes=[
            Route("/stream", stream),
            Route("/redirect", redirect),
            WebSocketRoute("/ws", ws_echo),
            Route("/{rest:path}", echo, methods=METHODS),
        ]
    )


@pytest.fixture(scope="module")
def leader() -> Iterator[Leader]:
    found = Leader(url="")
    with served(leader_app(found)) as url:
        found.url = url
        yield found


# --- the follower -------------------------------------------------------------------------


@dataclass
class Follower:
    url: str
    middleware: LeaderForwarding
    lease: HandLease | None = None  # None: as before the app has started
    forwarding: Forwarder | None = None

    @property
    def ws_url(self) -> str:
        return "ws" + self.url.removeprefix("http")


def follower_app(box: dict[str, Follower]) -> LeaderForwarding:
    async def here(request: Request) -> Response:
        body = await request.body()
        return JSONResponse(
            {
                "served_by": "follower",
                "method": request.method,
                "path": request.url.path,
                "body": body.decode(),
            }
        )

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        box["follower"].forwarding = forwarder(None)  # made in the serving loop, as the app does
        yield
        await box["follower"].forwarding.aclose()

    local = Starlette(routes=[Route("/{rest:path}", here, methods=METHODS)], lifespan=lifespan)

    def forwarding() -> Forwarder:
        made = box["follower"].forwarding
        assert made is not None
        return made

    return LeaderForwarding(
        local, lease=lambda: box["follower"].lease, forwarding=forwarding, wait_seconds=2.0
    )


@pytest.fixture(scope="module")
def serving_follower(leader: Leader) -> Iterator[Follower]:
    box: dict[str, Follower] = {}
    middleware = follower_app(box)
    box["follower"] = Follower(url="", middleware=middleware)
    with served(middleware) as url:
        box["follower"].url = url
        yield box["follower"]


@pytest.fixture
def follower(serving_follower: Follower, leader: Leader) -> Follower:
    """The follower, following the leader; its wait as set here, the leader's records empty."""
    serving_follower.lease = HandLease(leader_url=leader.url)
    serving_follower.middleware.wait_seconds = 2.0
    leader.requests.clear()
    leader.ws_closes.clear()
    leader.stream_gate.clear()
    return serving_follower


@pytest.fixture
async def http(follower: Follower) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=follower.url, timeout=15, trust_env=False) as client:
        yield client


def dead_url() -> str:
    """A loopback URL nothing listens on: a leader that cannot be connected to."""
    return f"http://127.0.0.1:{free_port()}"


def headers_of(answer: httpx.Response) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in answer.json()["headers"]:
        found.setdefault(name, []).append(value)
    return found


# --- HTTP -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/healthz", "/metrics", "/replicas", "/ui/jobs/3", "/docs"])
async def test_a_follower_answers_local_paths_itself(
    http: httpx.AsyncClient, leader: Leader, path: str
) -> None:
    answer = await http.get(path)
    assert answer.status_code == 200
    assert answer.json()["served_by"] == "follower"
    assert leader.requests == []


@pytest.mark.parametrize("path", ["/healthzx", "/uix", "/jobs", "/replicas-of-mine"])
async def test_paths_that_only_begin_like_local_ones_are_forwarded(
    http: httpx.AsyncClient, path: str
) -> None:
    assert (await http.get(path)).json()["served_by"] == "leader"


async def test_before_the_app_has_a_lease_it_answers_itself(
    http: httpx.AsyncClient, follower: Follower, leader: Leader
) -> None:
    follower.lease = None
    assert (await http.post("/jobs", content=b"x")).json()["served_by"] == "follower"
    assert leader.requests == []


async def test_the_leader_answers_what_it_is_forwarded_itself(
    http: httpx.AsyncClient, follower: Follower, leader: Leader
) -> None:
    assert follower.lease is not None
    follower.lease.is_leader = True  # this app leads: a forwarded request is its own to answer
    answer = await http.post("/jobs", content=b"x", headers={FORWARDED_BY: "aaaaaaaaaaaaaaaa"})
    assert answer.status_code == 200 and answer.json()["served_by"] == "follower"
    assert leader.requests == []


@pytest.mark.parametrize("method", METHODS)
async def test_a_request_is_forwarded_whole(http: httpx.AsyncClient, method: str) -> None:
    body = "".join(f"line {n}\n" for n in range(5000)) if method != "GET" else ""
    answer = await http.request(
        method,
        "/jobs/a%2Fb/logs?task=worker%3A0&q=a+b&empty=",
        content=body.encode(),
        headers={
            "authorization": "Bearer some-token",
            "content-type": "text/plain",
            "x-custom": "kept",
            "keep-alive": "timeout=5",  # hop-by-hop: this connection's, never passed on
            "proxy-authorization": "Basic secret",
        },
    )
    assert answer.status_code == 200
    echoed = answer.json()
    assert echoed["served_by"] == "leader"
    assert echoed["method"] == method
    assert echoed["raw_path"] == "/jobs/a%2Fb/logs"  # as sent, not decoded and encoded again
    assert echoed["query"] == "task=worker%3A0&q=a+b&empty="
    assert echoed["body"] == body
    headers = headers_of(answer)
    assert headers["authorization"] == ["Bearer some-token"]
    assert headers["content-type"] == ["text/plain"]
    assert headers["x-custom"] == ["kept"]
    assert headers[FORWARDED_BY] == [REPLICA]
    assert headers["x-forwarded-for"] == ["127.0.0.1"]
    assert "proxy-authorization" not in headers and "keep-alive" not in headers
    host = httpx.URL(http.base_url).netloc.decode()
    assert headers["host"] != [host]  # the leader's own host, not the follower's
    if body:
        assert headers["content-length"] == [str(len(body))]
    # The leader's response headers, every one of a repeated name.
    assert answer.headers["x-leader"] == "yes"
    assert answer.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert answer.headers["content-type"] == "application/json"


@pytest.mark.parametrize("status", [201, 404, 418, 503])
async def test_the_leaders_status_is_passed_on(http: httpx.AsyncClient, status: int) -> None:
    answer = await http.delete(f"/jobs/7?status={status}")
    assert answer.status_code == status
    assert answer.json()["served_by"] == "leader"
    assert "retry-after" not in answer.headers  # the leader's own answer, not the follower's


async def test_a_redirect_is_passed_on_not_followed(http: httpx.AsyncClient) -> None:
    answer = await http.get("/redirect")
    assert answer.status_code == 307
    assert answer.headers["location"] == "/elsewhere"


async def test_a_response_streams_through_as_the_leader_sends_it(
    http: httpx.AsyncClient, leader: Leader
) -> None:
    async with http.stream("GET", "/stream") as answer:
        assert answer.status_code == 200
        assert answer.headers["x-leader"] == "yes"
        assert answer.headers["content-type"].startswith("text/plain")
        chunks = answer.aiter_raw()
        # The first chunk arrives while the leader still holds the second back.
        first = await asyncio.wait_for(anext(chunks), 5)
        assert first == b"first\n"
        leader.stream_gate.set()
        rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"second\n"


async def test_a_forwarded_request_is_not_forwarded_again(
    http: httpx.AsyncClient, leader: Leader
) -> None:
    # Another replica forwarded this here, but this one does not lead: 503, no second hop.
    answer = await http.post("/jobs", content=b"{}", headers={FORWARDED_BY: "aaaaaaaaaaaaaaaa"})
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    detail = answer.json()["detail"]
    assert REPLICA in detail and "aaaaaaaaaaaaaaaa" in detail
    assert leader.requests == []


async def test_with_no_leader_it_waits_then_answers_503(
    http: httpx.AsyncClient, follower: Follower, leader: Leader
) -> None:
    assert follower.lease is not None
    follower.lease.leader_url = None
    follower.middleware.wait_seconds = 0.4
    started = time.monotonic()
    answer = await http.post("/jobs", content=b"{}")
    waited = time.monotonic() - started
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert "no replica leads" in answer.json()["detail"]
    assert 0.4 <= waited < 5
    assert leader.requests == []


async def test_a_leader_that_appears_during_the_wait_is_forwarded_to(
    http: httpx.AsyncClient, follower: Follower, leader: Leader
) -> None:
    assert follower.lease is not None
    follower.lease.leader_url = None
    follower.middleware.wait_seconds = 10
    request = asyncio.create_task(http.put("/jobs/1", content=b"held"))
    await asyncio.sleep(0.4)
    assert not request.done()  # held while nobody leads
    follower.lease.leader_url = leader.url
    answer = await asyncio.wait_for(request, 5)
    assert answer.status_code == 200
    assert answer.json()["served_by"] == "leader"
    assert answer.json()["body"] == "held"


async def test_an_unreachable_leader_is_retried_at_the_next_one(
    http: httpx.AsyncClient, follower: Follower, leader: Leader
) -> None:
    assert follower.lease is not None
    follower.lease.leader_url = dead_url()
    follower.middleware.wait_seconds = 10
    request = asyncio.create_task(http.post("/jobs", content=b"retried body"))
    await asyncio.sleep(0.5)
    assert not request.done()  # still trying the leader that does not answer
    follower.lease.leader_url = leader.url  # another replica took over
    answer = await asyncio.wait_for(request, 5)
    assert answer.status_code == 200
    echoed = answer.json()
    assert (echoed["served_by"], echoed["body"]) == ("leader", "retried body")


async def test_an_unreachable_leader_and_none_other_is_503_after_the_wait(
    http: httpx.AsyncClient, follower: Follower
) -> None:
    assert follower.lease is not None
    follower.lease.leader_url = unreachable = dead_url()
    follower.middleware.wait_seconds = 0.5
    started = time.monotonic()
    answer = await http.post("/jobs", content=b"{}")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert unreachable in answer.json()["detail"]
    assert 0.5 <= time.monotonic() - started < 5


async def test_a_follower_that_takes_over_while_retrying_answers_itself(
    http: httpx.AsyncClient, follower: Follower, leader: Leader
) -> None:
    assert follower.lease is not None
    follower.lease.leader_url = dead_url()
    follower.middleware.wait_seconds = 10
    body = "".join(f"{n:08d}" for n in range(20000))  # read whole before the first try
    request = asyncio.create_task(http.post("/jobs?x=1", content=body.encode()))
    await asyncio.sleep(0.5)
    assert not request.done()
    follower.lease.is_leader = True  # this replica took the lease meanwhile
    follower.lease.leader_url = follower.url
    answer = await asyncio.wait_for(request, 5)
    assert answer.status_code == 200
    echoed = answer.json()
    assert (echoed["served_by"], echoed["method"], echoed["path"]) == ("follower", "POST", "/jobs")
    assert echoed["body"] == body  # the body already read, replayed intact
    assert leader.requests == []


# --- websockets ---------------------------------------------------------------------------


async def closed_with(ws: ClientConnection) -> tuple[int, str]:
    """The close frame the client got: the code and reason."""
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    received = closed.value.rcvd
    assert received is not None, "closed without a close frame"
    return received.code, received.reason


async def test_a_websocket_is_forwarded_both_ways(follower: Follower, leader: Leader) -> None:
    async with connect(
        f"{follower.ws_url}/ws?job=3",
        subprotocols=[Subprotocol("strata.v1")],
        additional_headers={"authorization": "Bearer some-token"},
        proxy=None,
    ) as ws:
        assert ws.subprotocol == "strata.v1"  # the leader's choice, passed on
        arrived = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert arrived == {
            "forwarded_by": REPLICA,
            "authorization": "Bearer some-token",
            "path": "/ws",
            "query": "job=3",
        }
        await ws.send("some text")
        assert await asyncio.wait_for(ws.recv(), 10) == "some text"
        await ws.send(b"\x00\x01\xff bytes")
        assert await asyncio.wait_for(ws.recv(), 10) == b"\x00\x01\xff bytes"
        big = bytes(range(256)) * 4096  # 1 MiB: more than one read of the socket
        await ws.send(big)
        assert await asyncio.wait_for(ws.recv(), 10) == big
        # The leader closes: its code and reason reach the client.
        await ws.send("close 4001 the job ended")
        assert await closed_with(ws) == (4001, "the job ended")


async def test_the_clients_close_reaches_the_leader(follower: Follower, leader: Leader) -> None:
    async with connect(f"{follower.ws_url}/ws", proxy=None) as ws:
        await asyncio.wait_for(ws.recv(), 10)
        await ws.send("ping")
        assert await asyncio.wait_for(ws.recv(), 10) == "ping"
        await ws.close(4002, "client leaves")
    deadline = time.monotonic() + 10
    while not leader.ws_closes and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert leader.ws_closes == [(4002, "client leaves")]


async def test_a_websocket_with_no_leader_is_closed_try_again_later(follower: Follower) -> None:
    assert follower.lease is not None
    follower.lease.leader_url = None
    follower.middleware.wait_seconds = 0.3
    async with connect(f"{follower.ws_url}/ws", proxy=None) as ws:
        code, reason = await closed_with(ws)
    assert code == TRY_AGAIN_LATER
    assert "no replica leads" in reason


async def test_a_forwarded_websocket_is_not_forwarded_again(
    follower: Follower, leader: Leader
) -> None:
    headers = {FORWARDED_BY: "aaaaaaaaaaaaaaaa"}
    async with connect(f"{follower.ws_url}/ws", additional_headers=headers, proxy=None) as ws:
        code, reason = await closed_with(ws)
    assert code == TRY_AGAIN_LATER
    assert REPLICA in reason


async def test_a_websocket_to_an_unreachable_leader_is_closed_try_again_later(
    follower: Follower,
) -> None:
    assert follower.lease is not None
    follower.lease.leader_url = dead_url()
    async with connect(f"{follower.ws_url}/ws", proxy=None) as ws:
        code, _ = await closed_with(ws)
    assert code == TRY_AGAIN_LATER


VANISHING_LEADER = """
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

async def echo(websocket):
    await websocket.accept()
    async for text in websocket.iter_text():
        await websocket.send_text(text)

app = Starlette(routes=[WebSocketRoute("/ws", echo)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


@contextlib.contextmanager
def leader_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A leader in a process of its own, for the test to kill."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", VANISHING_LEADER, str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the leader process exited"
            assert time.monotonic() < deadline, "the leader process never listened"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


async def test_a_leader_that_goes_away_under_a_websocket_closes_it_1012(
    follower: Follower,
) -> None:
    assert follower.lease is not None
    with leader_process() as (url, process):
        follower.lease.leader_url = url
        async with connect(f"{follower.ws_url}/ws", proxy=None) as ws:
            await ws.send("still there?")
            assert await asyncio.wait_for(ws.recv(), 10) == "still there?"
            process.send_signal(signal.SIGKILL)  # no close frame: the process is gone
            code, reason = await closed_with(ws)
    assert code == SERVICE_RESTART
    assert "went away" in reason
