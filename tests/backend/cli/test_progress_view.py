"""A running job's progress in words: durations, rates, percent and unknown totals, as the
`jobs ls` cell, the `jobs show` line and the bar of `--follow` say them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from backend.cli.progress_view import (
    bar,
    percent,
    progress_cell,
    progress_line,
    progress_summary,
    readable_duration,
    readable_rate,
)
from backend.jobs.schemas import JobProgress

AT = datetime(2026, 1, 1, tzinfo=UTC)


def progress(**fields: Any) -> JobProgress:
    return JobProgress(updated_at=AT, **{"step": 1520, **fields})


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0s"),
        (0.4, "0s"),
        (45.6, "46s"),
        (59.4, "59s"),
        (60, "1m00s"),
        (202, "3m22s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (2 * 3600 + 5 * 60 + 59, "2h05m"),
        (86400 + 4 * 3600, "1d04h"),
        (30 * 86400, "30d00h"),
        (-5, "0s"),
        (float("inf"), "0s"),
    ],
)
def test_durations_read_as_their_two_largest_units(seconds: float, words: str) -> None:
    assert readable_duration(seconds) == words


@pytest.mark.parametrize(
    ("rate", "words"),
    [
        (1234.4, "1234/s"),
        (100, "100/s"),
        (12.34, "12.3/s"),
        (2.456, "2.46/s"),
        (0.1, "0.10/s"),
        (0.05, "20s/step"),  # a slow step reads better as its duration
        (1 / 150, "2m30s/step"),
        (0, "stalled"),
    ],
)
def test_rates(rate: float, words: str) -> None:
    assert readable_rate(rate) == words


def test_a_rate_may_name_its_unit() -> None:
    assert readable_rate(12.34, " steps/s") == "12.3 steps/s"
    assert readable_rate(0.05, " steps/s") == "20s/step"


@pytest.mark.parametrize(
    ("step", "total", "done"),
    [(0, 4000, 0), (1520, 4000, 38), (3999, 4000, 99), (4000, 4000, 100), (5000, 4000, 100)],
)
def test_percent_is_rounded_down_and_capped(step: int, total: int, done: int) -> None:
    # 99.975% is not done: 100 only once the last step is.
    assert percent(step, total) == done


def test_the_list_cell() -> None:
    assert progress_cell(None) == "-"
    full = progress(total_steps=4000, steps_per_second=12.34, eta_seconds=202)
    assert progress_cell(full) == "1520/4000 38% 12.3/s ETA 3m22s"
    # Before two steps are seen there is no rate, and so no ETA.
    assert progress_cell(progress(step=0, total_steps=4000)) == "0/4000 0%"
    # An unknown total: the step and the rate; an ETA needs a total.
    unknown = progress(steps_per_second=12.34, eta_seconds=99)
    assert progress_cell(unknown) == "step 1520 12.3/s"


def test_the_show_line() -> None:
    full = progress(
        total_steps=4000,
        epoch=2,
        epochs=5,
        steps_per_second=12.34,
        eta_seconds=202,
        busy="checkpointing",
    )
    assert progress_line(full) == (
        "step 1520 of 4000 (38%), epoch 2 of 5, 12.3 steps/s, ETA 3m22s, checkpointing"
    )
    assert progress_line(progress(epoch=3)) == "step 1520, epoch 3"
    assert progress_line(progress(step=0, busy="tracing")) == "step 0, tracing"


def test_the_bar_and_what_follows_it() -> None:
    assert bar(0, 4000, width=10) == "░" * 10
    assert bar(1520, 4000, width=10) == "███░░░░░░░"
    assert bar(4000, 4000, width=10) == "█" * 10
    assert bar(9000, 4000, width=10) == "█" * 10
    full = progress(total_steps=4000, epoch=2, epochs=5, steps_per_second=12.34, eta_seconds=202)
    assert progress_summary(full) == "1520/4000 38% · epoch 2/5 · 12.3/s · ETA 3m22s"
    assert progress_summary(progress(busy="evaluating")) == "step 1520 · evaluating"
