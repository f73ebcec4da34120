"""Garbage-collector settings for a long-running server process."""

from __future__ import annotations

import gc

# Young collections after this many new container objects (CPython's default is 700). A
# server under many agents allocates quickly, and each full collection walks every object
# the process holds, stalling the requests waiting meanwhile.
YOUNG_THRESHOLD = 10_000


def settle_for_serving() -> None:
    """Once the app is built: what exists now (modules, the app, the ORM's and pydantic's
    compiled schemas) lives as long as the process, so collections stop walking it; and
    collections come less often. Reference counting still frees everything at once; only
    cycles wait longer."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
