"""The last `GET /cluster` body, reused for a moment where building it is expensive.

At a thousand hosts the view is eight thousand devices and ten thousand tasks: building it
took most of a second of the event loop per request, while a dashboard on it asks every few
seconds and agents report only once a second. So a body that took long to build is served
again while it is fresh, and for a while after that while a new one is built beside the
requests; a cheap one (a small cluster) is built for every request, exactly as it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Build = Callable[[], Awaitable[bytes]]

CHEAP_SECONDS = 0.02  # a body built in less is never reused
FRESH_SECONDS = 1.0  # reused as is (an agent's heartbeat period)
STALE_SECONDS = 5.0  # served while a newer one is built; older, a request waits for it


class ClusterSnapshot:
    def __init__(self) -> None:
        self._body: bytes | None = None
        self._built_at = 0.0  # monotonic, when its building began
        self._cost = 0.0  # seconds its building took
        self._building: asyncio.Task[bytes] | None = None

    async def body(self, build: Build) -> bytes:
        """The cluster view's body: the snapshot where it may be served, else a new one."""
        body, age = self._body, time.monotonic() - self._built_at
        if body is not None and self._cost >= CHEAP_SECONDS and age < STALE_SECONDS:
            if age >= FRESH_SECONDS:
                self._start(build)  # the next requests get the newer one
            return body
        # Requests that arrive while a body is built share it (shielded: one that gives up
        # does not cancel the others').
        return await asyncio.shield(self._start(build))

    def _start(self, build: Build) -> asyncio.Task[bytes]:
        if self._building is None or self._building.done():
            self._building = asyncio.create_task(self._build(build))
            # A failed background build is the next request's to report (it builds again).
            self._building.add_done_callback(lambda t: t.cancelled() or t.exception())
        return self._building

    async def _build(self, build: Build) -> bytes:
        began = time.monotonic()
        body = await build()
        self._body, self._built_at, self._cost = body, began, time.monotonic() - began
        return body
