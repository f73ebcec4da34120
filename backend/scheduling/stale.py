"""Changes applied again when a job they read was changed by another writer before their
commit (jobs are versioned: the commit fails with StaleDataError). Requests and agents'
reports alike: an acknowledged request or a report is never lost to something concurrent."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.orm.exc import StaleDataError

log = logging.getLogger(__name__)
T = TypeVar("T")

STALE_RETRIES = 5  # times a change is tried in all, the last failure raised


async def applied_again_if_stale(attempt: Callable[[], Awaitable[T]], what: str) -> T:
    """Run `attempt` (one transaction, from its reads to its commit) until it commits, at
    most STALE_RETRIES times; `what` names the change in the log."""
    for tries in range(1, STALE_RETRIES + 1):
        try:
            return await attempt()
        except StaleDataError:
            if tries == STALE_RETRIES:
                raise
            log.info("a job changed while %s was applied; applying it again", what)
    raise AssertionError("unreachable")  # the last try returns or raises
