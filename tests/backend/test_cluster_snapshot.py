"""The reused GET /cluster body (backend.hosts.snapshot)."""

from __future__ import annotations

import asyncio

import pytest

from backend.hosts import snapshot
from backend.hosts.snapshot import ClusterSnapshot


class Builds:
    """Bodies b"1", b"2", ... each taking `seconds` to build."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.count = seconds, 0

    async def __call__(self) -> bytes:
        self.count += 1
        body = str(self.count).encode()
        await asyncio.sleep(self.seconds)
        return body


async def test_a_cheap_body_is_built_for_every_request() -> None:
    cache, build = ClusterSnapshot(), Builds(0.0)
    assert [await cache.body(build) for _ in range(3)] == [b"1", b"2", b"3"]


async def test_an_expensive_body_is_reused_while_fresh_then_rebuilt_beside_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(snapshot, "FRESH_SECONDS", 0.2)
    monkeypatch.setattr(snapshot, "STALE_SECONDS", 1.0)
    cache, build = ClusterSnapshot(), Builds(snapshot.CHEAP_SECONDS * 2)
    # Requests at once share one build.
    assert await asyncio.gather(cache.body(build), cache.body(build)) == [b"1", b"1"]
    assert await cache.body(build) == b"1"  # fresh
    await asyncio.sleep(0.25)
    assert await cache.body(build) == b"1"  # stale: served, and a newer one is being built
    await asyncio.sleep(snapshot.CHEAP_SECONDS * 4)
    assert await cache.body(build) == b"2"
    await asyncio.sleep(1.1)  # too old to serve: the request waits for a new one
    assert await cache.body(build) == b"3"
    assert build.count == 3


async def test_a_failed_build_fails_its_requests_and_the_next_builds_again() -> None:
    cache = ClusterSnapshot()
    calls = 0

    async def build() -> bytes:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database gone")
        return b"ok"

    with pytest.raises(RuntimeError, match="database gone"):
        await cache.body(build)
    assert await cache.body(build) == b"ok"
