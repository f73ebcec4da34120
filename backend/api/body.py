"""Reading a request body under a size limit, so that the refusal reaches the client.

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

from starlette.requests import ClientDisconnect, Request

from backend.errors import PayloadTooLarge

# Past these a refused body is no longer read: the answer goes out at once, and a client still
# sending may see a reset. Reading and dropping costs only bandwidth.
DRAIN_BYTES = 64 << 20
DRAIN_SECONDS = 30.0


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or PayloadTooLarge (413) when it is over `limit` bytes. At most
    `limit` bytes (and one chunk) are kept; the rest of a refused body is read and dropped."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        # A client waiting for "100 Continue" has sent nothing yet and will not until told.
        if declared <= DRAIN_BYTES and not expects_continue(request):
            await discard(request.stream(), DRAIN_BYTES)
        raise PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")
    body = bytearray()
    chunks = request.stream()
    async for chunk in chunks:
        body.extend(chunk)
        if len(body) > limit:
            await discard(chunks, DRAIN_BYTES - len(body))
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
    return bytes(body)


def declared_length(request: Request) -> int | None:
    """The Content-Length header as a number; None when absent (chunked) or not a number
    (the HTTP server refuses those before the app sees them)."""
    value = request.headers.get("content-length", "").strip()
    return int(value) if value.isascii() and value.isdigit() else None


def expects_continue(request: Request) -> bool:
    return request.headers.get("expect", "").strip().lower() == "100-continue"


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
