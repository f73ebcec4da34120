"""Blocking calls that last as long as a task (a container's wait, its output reader), awaited
from the agent's event loop without taking a thread of asyncio's shared pool.

`asyncio.to_thread` runs on the loop's default executor: min(32, CPUs + 4) threads. A wait
that lasts a container's whole life would hold one of them; with two such calls per container,
three containers fill the pool of a 2-CPU host, and the `docker stop` that would end them then
queues behind them forever. Each call here has a thread of its own instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _settle(future: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if future.done():  # the awaiting side was cancelled: nobody wants the outcome
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]  # None only with an error


def in_own_thread(call: Callable[[], T], name: str) -> asyncio.Future[T]:
    """Start `call()` in a new daemon thread; the returned future settles with its outcome.

    Cancelling the future does not stop the call (a blocked thread cannot be interrupted);
    it only stops waiting for it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = call()
        except BaseException as exc:  # handed to the awaiting side, as to_thread would
            error = exc
        # A closed loop raises RuntimeError: the agent is gone, and nobody waits.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
