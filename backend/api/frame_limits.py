"""Reading typed frames from a websocket under its channel's limits; a bad frame closes it.

Every client frame passes the same checks, in this order: it must be text (binary: 1003),
within the connection's rate (a token bucket; over it: 1008), and within the channel's size
(1009). Then it must parse as the message the channel expects: a bad first frame closes with
1008, a bad later one with 1002 (1009 when a list or string in it is over its bound). Every
refusal has a reason the peer can read; those for limits are also logged with the peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TypeVar

from fastapi import WebSocket
from pydantic import TypeAdapter, ValidationError
from starlette.websockets import WebSocketDisconnected

from backend.api.ratelimit import Clock, TokenBucket
from backend.monitoring.instruments import ServerMetrics

T = TypeVar("T")

log = logging.getLogger(__name__)

FIRST_FRAME_TIMEOUT = 10.0
MAX_REASON = 120  # a close frame carries at most 123 bytes of reason

# Close codes (RFC 6455 §7.4.1).
POLICY_VIOLATION = 1008
PROTOCOL_ERROR = 1002
UNSUPPORTED_DATA = 1003
MESSAGE_TOO_BIG = 1009
TRY_AGAIN_LATER = 1013


# What /metrics counts a refusal under when the caller names no cause: by its close code.
CAUSE_OF_CODE = {
    POLICY_VIOLATION: "policy",
    PROTOCOL_ERROR: "invalid_frame",
    UNSUPPORTED_DATA: "binary_frame",
    MESSAGE_TOO_BIG: "frame_too_big",
    TRY_AGAIN_LATER: "too_slow",
}


async def close(websocket: WebSocket, code: int, reason: str, *, cause: str | None = None) -> None:
    """Close with a reason (cut to what a close frame can carry), whatever state it is in.

    Every close through here is a refusal of the peer: it is counted in /metrics under
    `cause` (a short fixed word, never the reason, which may name anything)."""
    monitor = getattr(getattr(websocket.scope.get("app"), "state", None), "monitor", None)
    if isinstance(monitor, ServerMetrics):
        monitor.refused(websocket.scope.get("path", ""), cause or CAUSE_OF_CODE.get(code, "other"))
    encoded = reason.encode()
    if len(encoded) > MAX_REASON:
        reason = encoded[:MAX_REASON].decode(errors="ignore")
    with contextlib.suppress(Exception):
        await websocket.close(code, reason)


def _problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def _too_long(exc: ValidationError) -> bool:
    return any(error["type"] in ("too_long", "string_too_long") for error in exc.errors())


@dataclass(frozen=True)
class FrameLimits:
    """What one connection of a channel may send."""

    max_bytes: int  # characters of one text frame
    frames_per_second: float
    burst: int


class Inbound:
    """The frames a websocket's peer sends, read one at a time under the channel's limits.

    `peer` names the other end in warnings ("agent gpu-3", "runtime of job 7 chief:0");
    it may be set once the peer has said who it is.
    """

    def __init__(
        self,
        websocket: WebSocket,
        limits: FrameLimits,
        peer: str,
        clock: Clock | None = None,
    ) -> None:
        self.websocket = websocket
        self.limits = limits
        self.peer = peer
        self._bucket = TokenBucket(limits.frames_per_second, limits.burst, clock)

    async def refuse(self, code: int, reason: str, *, cause: str | None = None) -> None:
        """Close for a broken limit: the peer reads the reason, the server log names it."""
        log.warning("closing the websocket of %s (%d): %s", self.peer, code, reason)
        await close(self.websocket, code, reason, cause=cause)

    async def text(self, what: str = "") -> str | None:
        """The next text frame; None once the socket is closed, by the peer or for a reason.

        `what` names the frame expected, for the reasons ("hello frame over 4194304 bytes").
        """
        try:
            message = await self.websocket.receive()
        except WebSocketDisconnected:
            return None  # this side closed it meanwhile (a newer connection replaced it)
        if message["type"] != "websocket.receive":
            return None
        text = message.get("text")
        if not isinstance(text, str):
            await self.refuse(
                UNSUPPORTED_DATA,
                "binary frames are not accepted; send JSON text",
                cause="binary_frame",
            )
            return None
        if not self._bucket.take():
            await self.refuse(POLICY_VIOLATION, self._bucket.describe(), cause="rate_limit")
            return None
        if len(text) > self.limits.max_bytes:
            frame = f"{what} frame" if what else "frame"
            await self.refuse(MESSAGE_TOO_BIG, f"{frame} over {self.limits.max_bytes} bytes")
            return None
        return text

    async def first(
        self,
        adapter: TypeAdapter[T],
        what: str,
        *,
        within: float = FIRST_FRAME_TIMEOUT,
        example: str | None = None,
    ) -> T | None:
        """The frame that opens a session; on silence or garbage, close 1008 and return None.

        `example` is a valid frame, quoted in the reason when none came within `within`
        seconds, so that a peer that waits to be spoken to learns what to send.
        """
        try:
            async with asyncio.timeout(within):
                raw = await self.text(what)
        except TimeoutError:
            reason = f"expected a {what} frame within {within:g}s"
            await close(
                self.websocket,
                POLICY_VIOLATION,
                f"{reason}: {example}" if example else reason,
                cause="no_first_frame",
            )
            return None
        if raw is None:
            return None
        try:
            return adapter.validate_json(raw)
        except ValidationError as exc:
            await close(
                self.websocket,
                POLICY_VIOLATION,
                f"invalid {what} frame: {_problem(exc)}",
                cause="invalid_frame",
            )
            return None

    async def next(self, adapter: TypeAdapter[T]) -> T | None:
        """The next frame of a session; None when it closed (a bad frame closes it)."""
        raw = await self.text()
        if raw is None:
            return None
        try:
            return adapter.validate_json(raw)
        except ValidationError as exc:
            if _too_long(exc):
                await self.refuse(MESSAGE_TOO_BIG, f"frame over a limit: {_problem(exc)}")
            else:
                await close(self.websocket, PROTOCOL_ERROR, f"invalid frame: {_problem(exc)}")
            return None
