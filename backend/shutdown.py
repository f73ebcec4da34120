"""The server's shutdown, bounded: its background services are cancelled and waited for,
then its connections closed, each part for at most Settings.shutdown_seconds.

A service that does not end once cancelled (one stuck in a call that ignores cancellation,
such as a database driver waiting on a connection that will never answer, or one that
swallowed its cancellation) is cancelled once more, then logged by name and left behind:
one such task must not keep the whole process from exiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

log = logging.getLogger(__name__)


async def stop_services(services: Sequence[asyncio.Task[None]], seconds: float) -> list[str]:
    """Cancel the services and wait for them to end, at most `seconds`: cancelled again
    halfway (a service may have swallowed the first cancellation). Returns the names of
    those that did not end, which are logged; a service that had failed is logged too."""
    running: set[asyncio.Task[None]] = set(services)
    for share in (seconds / 2, seconds / 2):
        for task in running:
            task.cancel()
        if running:
            _, running = await asyncio.wait(running, timeout=share)
    for task in services:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error(
                "background service %s had failed", task.get_name(), exc_info=task.exception()
            )
    stuck = sorted(task.get_name() for task in running)
    if stuck:
        log.error(
            "shutting down without %s: still running %s s after cancellation",
            ", ".join(stuck),
            seconds,
        )
    return stuck


async def close_within(what: str, close: Callable[[], Awaitable[None]], seconds: float) -> bool:
    """Run one step of the shutdown for at most `seconds`; False (and logged) when it did
    not end in time, or failed."""
    task = asyncio.ensure_future(close())
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        log.error("shutting down without closing %s: not done %s s after it began", what, seconds)
        return False
    if task.exception() is not None:
        log.error("closing %s failed", what, exc_info=task.exception())
        return False
    return True
