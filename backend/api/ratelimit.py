"""A token bucket: how many frames a websocket may send, on average and at once."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]


def now() -> float:
    """The clock a bucket reads unless it is given one (seconds, monotonic)."""
    return time.monotonic()


class TokenBucket:
    """Holds up to `burst` tokens and gains `rate` a second; each frame takes one.

    The clock is injected (seconds, monotonic) so that tests can move time by hand; without
    one the bucket reads this module's `now` as it is when the bucket is made.
    """

    def __init__(self, rate: float, burst: int, clock: Clock | None = None) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst ≥ 1 (got {rate}, {burst})")
        self.rate = rate
        self.burst = burst
        self._clock = clock if clock is not None else now
        self._tokens = float(burst)
        self._at = self._clock()

    def take(self) -> bool:
        """Spend one token if there is one; False means the sender is over its rate."""
        at = self._clock()
        elapsed = max(0.0, at - self._at)
        self._at = at
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def describe(self) -> str:
        return f"over {self.rate:g} frames/s (burst {self.burst})"
