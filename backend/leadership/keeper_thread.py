"""The lease renewed on a thread and event loop of its own.

A leader that renewed on the server's event loop would lose its lease whenever that loop is
busy for a third of the lease time (a long pass, a burst of agents' frames on a loaded host),
and a takeover would follow though nothing was wrong. On its own thread the renewal needs only
a few milliseconds of CPU now and then, which the interpreter switches to within its switch
interval however busy the server's loop is. Everything the keeper does with the database runs
on this thread's loop (its connection belongs to that loop); what it tells the server (it
leads, it stepped down, it was superseded) is handed to the server's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from backend.leadership.lease import LeaseKeeper, OnChange, OnSuperseded

T = TypeVar("T")


class KeeperThread:
    def __init__(self, keeper: LeaseKeeper) -> None:
        self.keeper = keeper
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="strata-lease", daemon=True
        )
        self._thread.start()
        self._renewing: concurrent.futures.Future[None] | None = None

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """`coroutine` run on the keeper's loop, awaited from the server's."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def tell(self, on_change: OnChange, on_superseded: OnSuperseded) -> None:
        """Have the keeper's news called on the server's loop (the caller's)."""
        server = asyncio.get_running_loop()
        self.keeper.on_change = lambda leading: _on(server, on_change, leading)
        self.keeper.on_superseded = lambda why: _on(server, on_superseded, why)

    def start_renewing(self) -> None:
        self._renewing = asyncio.run_coroutine_threadsafe(self.keeper.run(), self._loop)

    async def stop(self) -> None:
        """Stop renewing, give the lease up, and end the thread."""
        try:
            if self._renewing is not None:
                self._renewing.cancel()
            await self.run(self.keeper.release())
            await self.run(self.keeper.engine.dispose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join, 10)
            if not self._thread.is_alive():
                self._loop.close()


def _on(server: asyncio.AbstractEventLoop, told: Callable[[T], None], value: T) -> None:
    # From either loop (the fence steps down on the server's): always queued on the server's.
    server.call_soon_threadsafe(told, value)
