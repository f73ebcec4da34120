"""The per-worker rates of parameter_server jobs, from the chief's closure counters: over a full
window only, with the counters' values held between reports, for the chief's current attempt."""

from __future__ import annotations

import pytest

from agents.protocol import MetricPoint
from backend.streams.throughput import STALE_SECONDS, ThroughputBoard, closures_metric


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def points(at: float, **totals: float) -> list[MetricPoint]:
    """The chief's report at wall time `at`: worker index ("w0") -> closures so far."""
    return [
        MetricPoint(seq=0, name=closures_metric(int(w[1:])), step=0, value=v, wall_time=at)
        for w, v in totals.items()
    ] + [MetricPoint(seq=0, name="loss", step=0, value=1.0, wall_time=at)]


def test_rates_need_a_full_window_and_hold_values_between_reports() -> None:
    board = ThroughputBoard(window=10.0, clock=Clock())
    board.note(1, "chief:0", 0, points(100.0, w0=0, w1=0))
    board.note(1, "chief:0", 0, points(105.0, w0=50, w1=10))
    assert board.rates(1) is None  # 5 s of reports: not a window yet
    board.note(1, "chief:0", 0, points(110.0, w0=100))  # worker 1 unchanged: not reported
    window = board.rates(1)
    assert window is not None and window.window == 10.0 and window.end == 110.0
    assert window.rates == {"worker:0": pytest.approx(10.0), "worker:1": pytest.approx(1.0)}
    board.note(1, "chief:0", 0, points(120.0, w0=200, w1=10))  # the 10 s heartbeat
    window = board.rates(1)
    assert window is not None and window.rates == {"worker:0": 10.0, "worker:1": 0.0}


def test_only_the_chief_s_current_attempt_counts() -> None:
    board = ThroughputBoard(window=10.0, clock=Clock())
    board.note(1, "worker:0", 0, points(100.0, w0=0))  # only a coordinator has these
    assert board.job_ids() == set()
    board.note(1, "chief:0", 0, points(100.0, w0=0, w1=0))
    board.note(1, "chief:0", 0, points(111.0, w0=110, w1=110))
    board.note(1, "chief:0", 1, points(112.0, w0=1, w1=1))  # a new chief: its counters anew
    assert board.attempt(1) == 1 and board.rates(1) is None
    board.note(1, "chief:0", 0, points(130.0, w0=500, w1=500))  # a late frame of the old one
    board.note(1, "chief:0", 1, points(122.0, w0=21, w1=11))
    window = board.rates(1)
    assert window is not None and window.rates == {"worker:0": 2.0, "worker:1": 1.0}


def test_resent_points_are_skipped_and_stale_reports_say_nothing() -> None:
    clock = Clock()
    board = ThroughputBoard(window=10.0, clock=clock)
    board.note(1, "chief:0", 0, points(100.0, w0=0, w1=0))
    board.note(1, "chief:0", 0, points(110.0, w0=30, w1=20))
    board.note(1, "chief:0", 0, points(100.0, w0=0, w1=0))  # a resend of the first batch
    window = board.rates(1)
    assert window is not None and window.rates == {"worker:0": 3.0, "worker:1": 2.0}
    clock.now += STALE_SECONDS + 1
    assert board.rates(1) is None  # the chief went quiet: no judging on old figures
    board.forget(1)
    assert board.job_ids() == set()


def test_a_worker_first_counted_within_the_window_is_left_out() -> None:
    board = ThroughputBoard(window=10.0, clock=Clock())
    board.note(1, "chief:0", 0, points(100.0, w0=0))
    board.note(1, "chief:0", 0, points(105.0, w0=10, w1=0))
    board.note(1, "chief:0", 0, points(110.0, w0=20, w1=5))
    window = board.rates(1)
    assert window is not None and window.rates == {"worker:0": 2.0}


def test_a_board_with_no_window_keeps_nothing() -> None:
    board = ThroughputBoard(window=0.0, clock=Clock())
    board.note(1, "chief:0", 0, points(100.0, w0=0))
    assert board.job_ids() == set()
