"""Bounding every request body by STRATA_MAX_REQUEST_BYTES, so that the refusal reaches the client.

BodyLimit, a middleware create_app installs, answers 413 for a body over the limit on any HTTP
route: at once when its Content-Length says so, and as soon as the bytes received pass the limit
when it is chunked. A route therefore never holds more than the limit of a body, whether it
reads the body itself or lets FastAPI parse it into a model. A route may be given a larger limit
of its own (PUT /code/{sha256}, by STRATA_MAX_CODE_BYTES). Websockets pass untouched: their
frames have their own limits.

An answer sent while the client is still sending its body is easily lost. When the connection
is to close after the answer (the client sent `Connection: close`, as urllib does, or spoke
HTTP/1.0), uvicorn closes the socket as soon as the answer is written; a socket closed with
bytes still unread makes the kernel send a reset instead of a FIN, and the reset makes the
client's stack fail its send and drop the answer it had not yet read (RFC 9112 §9.6). So what
is left of a refused body is read and dropped first, within bounds, and the 413 goes out on a
connection that has nothing unread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.errors import PayloadTooLarge, error_response

# Past these a refused body is no longer read: the answer goes out at once, and a client still
# sending may see a reset. Reading and dropping costs only bandwidth.
DRAIN_BYTES = 64 << 20
DRAIN_SECONDS = 30.0


class BodyLimit:
    """Refuses an HTTP request whose body is over `limit` bytes with a 413, before the route
    has read more than `limit` bytes of it; the rest of the body is read and dropped first."""

    def __init__(
        self, app: ASGIApp, limit: int, larger: tuple[tuple[str, str, int], ...] = ()
    ) -> None:
        self.app = app
        self.default_limit = limit
        # (method, path prefix, limit): the routes that take bigger bodies (code bundles).
        self.larger = larger

    def limit_for(self, scope: Scope) -> int:
        for method, prefix, limit in self.larger:
            if scope.get("method") == method and str(scope.get("path", "")).startswith(prefix):
                return limit
        return self.default_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        headers = Headers(scope=scope)
        declared = declared_length(headers)
        if declared is not None and declared > limit:
            # A client waiting for "100 Continue" has sent nothing yet and will not until told.
            if declared <= DRAIN_BYTES and not expects_continue(headers):
                await discard(Request(scope, receive).stream(), DRAIN_BYTES)
            refusal = PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")
            await error_response(refusal)(scope, receive, send)
            return

        received = 0
        started = refused = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            if refused:
                raise ClientDisconnect
            message = await receive()
            if message["type"] != "http.request":
                return message
            received += len(message.get("body", b""))
            if received <= limit:
                return message
            if not started:  # an answer begun cannot become a 413: the route is only cut off
                if message.get("more_body", False):
                    await discard(Request(scope, receive).stream(), DRAIN_BYTES - received)
                refused = True
                refusal = PayloadTooLarge(f"request body is over the limit of {limit} bytes")
                await error_response(refusal)(scope, receive, send)
            # For the route the request ends here, as if the client had gone.
            raise ClientDisconnect

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:  # the 413 went out: whatever the route answers to its cut body is dropped
                return
            started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            # After the 413 an error from the cut body is expected, and the client has its answer.
            if not refused:
                raise


def declared_length(headers: Headers) -> int | None:
    """The Content-Length header as a number; None when absent (chunked) or not a number
    (the HTTP server refuses those before the app sees them)."""
    value = headers.get("content-length", "").strip()
    return int(value) if value.isascii() and value.isdigit() else None


def expects_continue(headers: Headers) -> bool:
    return headers.get("expect", "").strip().lower() == "100-continue"


async def discard(chunks: AsyncIterator[bytes], budget: int) -> None:
    """Read and drop the rest of a body: until its end, `budget` bytes, DRAIN_SECONDS or the
    client's going away, whichever comes first."""
    seen = 0
    with contextlib.suppress(ClientDisconnect, TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for chunk in chunks:
                seen += len(chunk)
                if seen > budget:
                    return
