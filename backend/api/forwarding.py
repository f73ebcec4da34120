"""A follower forwards to the leader: every change takes the one path, through the leader.

Replicas on one PostgreSQL share a load balancer, which sends any request, agent or training
process to any of them. What a follower can answer from itself it answers (its health, its
own metrics, the replicas, the dashboard's files); every other request and websocket it
forwards to the leader, so that the leader's controller applies every change, and agents,
runtimes and live streams are all connected to the one process that commands them and
publishes their frames. While nobody leads (a takeover under way) a follower holds requests
for up to two lease times, then answers 503 with Retry-After.

A forwarded request carries `X-Strata-Forwarded-By`; a replica that gets one but does not
lead answers 503 rather than forward it again, so that two replicas that each think the other
leads cannot pass a request between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from agents.protocol import KEEPALIVE_PING_SECONDS, KEEPALIVE_TIMEOUT_SECONDS
from backend.errors import Unavailable, error_response
from backend.headers import HOP_BY_HOP
from backend.leadership.lease import Lease

log = logging.getLogger(__name__)

FORWARDED_BY = "x-strata-forwarded-by"
# Answered by every replica itself: nothing in them is the leader's to say.
LOCAL_PREFIXES = ("/healthz", "/metrics", "/replicas", "/ui", "/docs", "/redoc", "/openapi.json")
# Not passed on to the leader: its Host is its own, and the body is sent whole.
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
LEADER_POLL_SECONDS = 0.05
HERE = "here"  # where to forward once this replica took over: it answers itself
# A websocket's close codes: 1013 "try again later" while nobody leads; 1012 "service
# restart" when the leader went away under a forwarded channel.
TRY_AGAIN_LATER = 1013
SERVICE_RESTART = 1012
MAX_FRAME_BYTES = 64 << 20  # the leader's own limits apply to what is forwarded
WATCH_SECONDS = 0.5  # how often a forwarded websocket checks that its leader still leads


@dataclass
class Forwarder:
    """What a follower forwards with: an HTTP client, and the TLS context of both kinds."""

    http: httpx.AsyncClient
    tls: ssl.SSLContext

    async def aclose(self) -> None:
        await self.http.aclose()


def forwarder(ca_file: Path | None) -> Forwarder:
    """`ca_file` verifies a leader's own certificate (replicas serving TLS with
    STRATA_TLS_CERTFILE share it); else the system's authorities."""
    tls = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    http = httpx.AsyncClient(
        verify=tls,
        # A response may stream for as long as the client reads it (logs, waits).
        timeout=httpx.Timeout(connect=2.0, read=None, write=30.0, pool=None),
        follow_redirects=False,
    )
    return Forwarder(http=http, tls=tls)


def is_local(path: str) -> bool:
    return path == "/" or any(
        path == prefix or path.startswith(prefix + "/") for prefix in LOCAL_PREFIXES
    )


class LeaderForwarding:
    """ASGI middleware: on a follower, forwards what is not `is_local` to the leader."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        lease: Callable[[], Lease | None],
        forwarding: Callable[[], Forwarder],
        wait_seconds: float,
    ) -> None:
        self.app = app
        self.lease = lease  # None until the app has started
        self.forwarding = forwarding  # made as the app starts, closed as it stops
        self.wait_seconds = wait_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lease = self.lease()
        if (
            scope["type"] not in ("http", "websocket")
            or lease is None
            or lease.is_leader
            or is_local(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        forwarded_by = Headers(scope=scope).get(FORWARDED_BY)
        if forwarded_by is not None:
            await _unavailable(
                scope,
                receive,
                send,
                f"replica {lease.replica} was forwarded this by {forwarded_by} but does not "
                "lead (any more); retry",
            )
            return
        leader = await self._leader(lease)
        if leader is None:
            if lease.is_leader:  # it took the lease while the request waited
                await self.app(scope, receive, send)
            else:
                await _unavailable(
                    scope,
                    receive,
                    send,
                    "no replica leads at the moment (a takeover is under way); retry",
                )
            return
        if scope["type"] == "http":
            await self._http(scope, receive, send, leader, lease)
        else:
            await self._websocket(scope, receive, send, leader, lease)

    async def _leader(self, lease: Lease) -> str | None:
        """The leader's URL, waited for while nobody leads; None if this replica took over
        meanwhile or none did in time."""
        deadline = time.monotonic() + self.wait_seconds
        while (url := lease.leader_url) is None or lease.is_leader:
            if lease.is_leader or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(LEADER_POLL_SECONDS)
        return url

    async def _after_failure(
        self, lease: Lease, leader: str, failure: Exception, deadline: float
    ) -> str | None:
        """After `leader` could not be reached: the next leader's URL, HERE if this replica
        took over meanwhile, None once none is reachable by `deadline`."""
        log.warning("forwarding to the leader at %s failed: %r", leader, failure)
        await asyncio.sleep(LEADER_POLL_SECONDS * 4)
        next_leader = await self._leader(lease)
        if lease.is_leader:
            return HERE
        if next_leader is None or time.monotonic() >= deadline:
            return None
        return next_leader

    # --- HTTP -------------------------------------------------------------------------

    async def _http(
        self, scope: Scope, receive: Receive, send: Send, leader: str, lease: Lease
    ) -> None:
        # Read whole (BodyLimit has bounded it), so that a leader that cannot be reached is
        # retried at the next one without the client sending it again.
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = _passed_on(scope, lease.replica)
        deadline = time.monotonic() + self.wait_seconds
        while True:
            request = self.forwarding().http.build_request(
                scope["method"], _target(leader, scope), headers=headers, content=bytes(body)
            )
            try:
                response = await self.forwarding().http.send(request, stream=True)
                break
            except httpx.ConnectError as exc:
                # Nothing was sent: the leader is gone or not yet reachable. Another may lead.
                next_leader = await self._after_failure(lease, leader, exc, deadline)
                if next_leader == HERE:
                    await self.app(scope, _replay(bytes(body)), send)
                    return
                if next_leader is None:
                    await _unavailable(scope, receive, send, _unreachable(leader))
                    return
                leader = next_leader
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (name, value)
                        for name, value in response.headers.raw
                        if name.decode("latin-1").lower() not in HOP_BY_HOP
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    # --- websockets ---------------------------------------------------------------------

    async def _websocket(
        self, scope: Scope, receive: Receive, send: Send, leader: str, lease: Lease
    ) -> None:
        downstream = WebSocket(scope, receive, send)
        headers = [
            (name, value)
            for name, value in _passed_on(scope, lease.replica)
            if not name.startswith("sec-websocket-")
        ]
        subprotocols = scope.get("subprotocols") or None
        deadline = time.monotonic() + self.wait_seconds
        while True:
            url = "ws" + _target(leader, scope).removeprefix("http")
            try:
                upstream = await connect(
                    url,
                    additional_headers=headers,
                    subprotocols=subprotocols,
                    max_size=MAX_FRAME_BYTES,
                    compression=None,
                    open_timeout=5,
                    ping_interval=KEEPALIVE_PING_SECONDS,
                    ping_timeout=KEEPALIVE_TIMEOUT_SECONDS,
                    ssl=self.forwarding().tls if url.startswith("wss:") else None,
                )
                break
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                # The client's handshake is not answered yet: it waits for the next leader
                # rather than reconnect (and back off) while the dead one's lease runs out.
                next_leader = await self._after_failure(lease, leader, exc, deadline)
                if next_leader == HERE:
                    await self.app(scope, receive, send)
                    return
                if next_leader is None:
                    await downstream.accept()
                    await downstream.close(TRY_AGAIN_LATER, _unreachable(leader)[:120])
                    return
                leader = next_leader
        async with upstream:
            await downstream.accept(subprotocol=upstream.subprotocol)
            up = asyncio.create_task(_down_to_up(downstream, upstream))
            down = asyncio.create_task(_up_to_down(upstream, downstream))
            moved = asyncio.create_task(_leader_moved(lease, leader))
            try:
                await asyncio.wait([up, down, moved], return_when=asyncio.FIRST_COMPLETED)
                if moved.done():
                    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                        await downstream.close(SERVICE_RESTART, "the leader changed; reconnect")
            finally:
                for task in (up, down, moved):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task


async def _leader_moved(lease: Lease, leader: str) -> None:
    """Returns once `leader` no longer leads: a paused leader keeps its sockets open, and
    what is forwarded to it would wait for it to wake, or for keepalive to give up."""
    while lease.leader_url == leader:  # noqa: ASYNC110 - changed on the keeper's thread
        await asyncio.sleep(WATCH_SECONDS)


async def _down_to_up(downstream: WebSocket, upstream: ClientConnection) -> None:
    while True:
        message = await downstream.receive()
        if message["type"] == "websocket.disconnect":
            await upstream.close(_sendable(message.get("code")), message.get("reason") or "")
            return
        text, data = message.get("text"), message.get("bytes")
        await upstream.send(text if text is not None else data or b"")


async def _up_to_down(upstream: ClientConnection, downstream: WebSocket) -> None:
    try:
        async for frame in upstream:
            if isinstance(frame, str):
                await downstream.send_text(frame)
            else:
                await downstream.send_bytes(frame)
    except ConnectionClosed:
        pass
    code, reason = upstream.close_code, upstream.close_reason or ""
    if code is None or code in (1005, 1006):  # no close frame: the leader went away
        code, reason = SERVICE_RESTART, "the leader went away; reconnect"
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await downstream.close(code, reason)


def _unreachable(leader: str) -> str:
    return f"the leader at {leader} is not reachable and no other replica leads yet; retry"


def _replay(body: bytes) -> Receive:
    """A receive that gives the body already read, then waits as for a disconnect."""
    messages: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the app asks again only to learn of a disconnect
        raise AssertionError("unreachable")

    return receive


def _sendable(code: int | None) -> int:
    """A close code that may be sent in a close frame (1005 and 1006 are only reported)."""
    return 1000 if code is None or code in (1005, 1006) else code


def _target(leader: str, scope: Scope) -> str:
    path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string", b"")
    target = leader.rstrip("/") + path.decode("latin-1")
    return f"{target}?{query.decode('latin-1')}" if query else target


def _passed_on(scope: Scope, replica: str) -> list[tuple[str, str]]:
    headers = [
        (name.decode("latin-1").lower(), value.decode("latin-1"))
        for name, value in scope["headers"]
        if name.decode("latin-1").lower() not in NOT_FORWARDED
    ]
    client = scope.get("client")
    if client:
        headers.append(("x-forwarded-for", str(client[0])))
    headers.append((FORWARDED_BY, replica))
    return headers


async def _unavailable(scope: Scope, receive: Receive, send: Send, reason: str) -> None:
    if scope["type"] == "websocket":
        websocket = WebSocket(scope, receive, send)
        await websocket.accept()
        await websocket.close(TRY_AGAIN_LATER, reason[:120])
        return
    await error_response(Unavailable(reason))(scope, receive, send)
