"""Which workers are stragglers: pure, no I/O.

A worker is slow when the median of its job's workers' rates is more than SLOW_FACTOR times
its own (rate < median / 1.5), over the same full window. The median of two workers is their
mean, so with two a worker is slow only under half the other's rate (a < (a + b) / 3 means
2a < b); with three or more, the median is the middle worker's and one slow worker cannot
drag it down. A slow worker stays slow until its rate is back over median / CLEAR_FACTOR:
between the two it keeps what it was, so a rate near the line does not flap.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping
from dataclasses import dataclass

SLOW_FACTOR = 1.5
CLEAR_FACTOR = 1.2


@dataclass(frozen=True)
class Verdict:
    median: float  # closures per second, of the workers judged
    slow: frozenset[str]  # the workers slow now (newly or still)


def judge(rates: Mapping[str, float], slow_before: Collection[str] = ()) -> Verdict | None:
    """The workers slow now, of those with a rate; None when fewer than two workers are
    judged, or none of them worked (an idle job has no straggler)."""
    if len(rates) < 2:
        return None
    median = statistics.median(rates.values())
    if median <= 0:
        return None
    slow = frozenset(
        worker
        for worker, rate in rates.items()
        if rate * SLOW_FACTOR < median or (worker in slow_before and rate * CLEAR_FACTOR < median)
    )
    return Verdict(median=median, slow=slow)


def per_second(rate: float) -> str:
    """2.1, 0.35, 12: closures per second for people."""
    return f"{rate:.2g}" if rate < 10 else f"{rate:.0f}"
