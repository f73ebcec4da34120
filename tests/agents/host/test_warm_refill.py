"""A warm pool's refill waits for a free CPU (training keeps its cores), but never past its
patience, and not at all where the host's CPU times cannot be read."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator

import pytest

from agents.host import warm_pool
from agents.host.procfs import CpuTimes
from agents.host.warm_pool import WarmPool


def samples(idle_share: float, cpus: int) -> Callable[[], CpuTimes]:
    """CPU times that grow by 100 ticks per CPU per sample, `idle_share` of them idle."""
    ticks: Iterator[int] = iter(range(1_000_000))

    def sample() -> CpuTimes:
        n = next(ticks)
        return n * 100 * cpus * idle_share, n * 100.0 * cpus

    return sample


@pytest.fixture(autouse=True)
def short_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_pool, "FREE_CPU_WINDOW", 0.01)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def waited(pool: WarmPool) -> float:
    started = time.monotonic()
    asyncio.run(pool.until_a_cpu_is_free())
    return time.monotonic() - started


def test_a_refill_waits_while_no_cpu_is_free_until_its_patience_runs_out() -> None:
    busy = WarmPool(size=1, memory_budget=None, refill_patience=0.3, sample_cpu=samples(0.1, 2))
    assert 0.3 <= waited(busy) < 2.0  # 0.2 CPUs free of 2: it waited its whole patience


def test_a_refill_starts_once_a_cpu_is_free() -> None:
    quiet = WarmPool(size=1, memory_budget=None, refill_patience=30, sample_cpu=samples(0.6, 2))
    assert waited(quiet) < 1.0  # 1.2 CPUs free: after one window, not 30 s


def test_without_cpu_times_a_refill_does_not_wait() -> None:
    unknown = WarmPool(size=1, memory_budget=None, refill_patience=30, sample_cpu=lambda: None)
    assert waited(unknown) < 0.5
