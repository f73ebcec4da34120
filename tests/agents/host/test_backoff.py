"""The agent's reconnect backoff: exponential windows, full jitter, a floor, no overflow."""

from __future__ import annotations

import random

from agents.host.channel import Backoff


class Extremes(random.Random):
    """Draws the low end, then the high end, of each window in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.high = False

    def uniform(self, a: float, b: float) -> float:
        self.high = not self.high
        return a if self.high else b


def test_each_attempt_draws_from_the_whole_of_a_doubling_window() -> None:
    windows: list[tuple[float, float]] = []

    class Recording(random.Random):
        def uniform(self, a: float, b: float) -> float:
            windows.append((a, b))
            return b

    backoff = Backoff(rng=Recording())
    delays = [backoff.next() for _ in range(8)]
    assert (
        windows == [(0.1, 0.5), (0.1, 1.0), (0.1, 2.0), (0.1, 4.0), (0.1, 8.0)] + [(0.1, 10.0)] * 3
    )
    assert delays == [b for _, b in windows]


def test_full_jitter_reaches_down_to_the_floor_at_every_attempt() -> None:
    backoff = Backoff(rng=Extremes())
    delays = [backoff.next() for _ in range(10)]
    # Low, high, low, high...: every window starts at the floor, not at half its top.
    assert delays[0::2] == [0.1] * 5
    assert delays[1::2] == [1.0, 4.0, 10.0, 10.0, 10.0]


def test_a_seeded_sequence_stays_in_its_windows_and_spreads_over_them() -> None:
    backoff = Backoff(rng=random.Random(7))
    for attempt in range(12):
        top = min(10.0, 0.5 * 2**attempt)
        delay = backoff.next()
        assert 0.1 <= delay <= top
    # Over many draws at the ceiling, the lower half of the window is used as much as the upper.
    draws = [backoff.next() for _ in range(2000)]
    assert min(draws) < 1.0
    assert 0.4 < sum(d < 5.05 for d in draws) / len(draws) < 0.6
    assert all(0.1 <= d <= 10.0 for d in draws)


def test_reset_starts_over_from_the_first_window() -> None:
    backoff = Backoff(rng=random.Random(1))
    for _ in range(6):
        backoff.next()
    backoff.reset()
    assert backoff.next() <= 0.5


def test_hours_of_failed_reconnects_do_not_overflow() -> None:
    backoff = Backoff(rng=random.Random(3))
    backoff.attempts = 5000  # about ten hours of a server that does not answer
    assert 0.1 <= backoff.next() <= 10.0
