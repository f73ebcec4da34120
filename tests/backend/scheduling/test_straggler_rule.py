"""The straggler rule: under the median / 1.5 is slow; back over the median / 1.2 clears it."""

from __future__ import annotations

from backend.scheduling.straggler_rule import judge, per_second


def test_a_worker_under_two_thirds_of_the_median_is_slow() -> None:
    verdict = judge({"worker:0": 6.0, "worker:1": 6.3, "worker:2": 3.9})
    assert verdict is not None and verdict.median == 6.0 and verdict.slow == {"worker:2"}
    verdict = judge({"worker:0": 6.0, "worker:1": 6.3, "worker:2": 4.1})
    assert verdict is not None and verdict.slow == frozenset()
    verdict = judge({"worker:0": 6.0, "worker:1": 6.3, "worker:2": 4.0})  # exactly 6 / 1.5
    assert verdict is not None and verdict.slow == frozenset()


def test_with_two_workers_one_must_be_under_half_the_other() -> None:
    verdict = judge({"worker:0": 10.0, "worker:1": 4.9})
    assert verdict is not None and verdict.slow == {"worker:1"}
    verdict = judge({"worker:0": 10.0, "worker:1": 5.1})
    assert verdict is not None and verdict.slow == frozenset()


def test_a_slow_worker_stays_slow_until_it_is_well_back() -> None:
    rates = {"worker:0": 6.0, "worker:1": 6.0, "worker:2": 4.5}  # between 4 and 5
    assert judge(rates).slow == frozenset()  # type: ignore[union-attr]
    assert judge(rates, {"worker:2"}).slow == {"worker:2"}  # type: ignore[union-attr]
    rates["worker:2"] = 5.1
    assert judge(rates, {"worker:2"}).slow == frozenset()  # type: ignore[union-attr]


def test_one_worker_or_an_idle_job_has_no_straggler() -> None:
    assert judge({"worker:0": 1.0}) is None
    assert judge({"worker:0": 0.0, "worker:1": 0.0, "worker:2": 5.0}) is None


def test_rates_read_as_people_write_them() -> None:
    assert [per_second(r) for r in (2.123, 0.351, 12.6)] == ["2.1", "0.35", "13"]
