"""Lifelong blocking calls leave asyncio's shared thread pool to the short ones (a stop)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agents.host.lifelong_calls import in_own_thread


def test_calls_that_outlast_the_pool_size_do_not_starve_a_short_call() -> None:
    released = threading.Event()

    async def scenario() -> None:
        # What asyncio gives a small host, scaled down; asyncio.run shuts it down after.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
        waits = [in_own_thread(released.wait, f"wait-{n}") for n in range(5)]
        try:
            # A stop's blocking call still gets a thread of the shared pool at once.
            stopped = await asyncio.wait_for(asyncio.to_thread(lambda: "stopped"), 10)
            assert stopped == "stopped"
            assert not any(wait.done() for wait in waits)
        finally:
            released.set()
        assert await asyncio.wait_for(asyncio.gather(*waits), 10) == [True] * 5

    asyncio.run(scenario())


async def test_the_calls_error_reaches_the_awaiting_side() -> None:
    def fails() -> None:
        raise ValueError("the engine went away")

    with pytest.raises(ValueError, match="the engine went away"):
        await asyncio.wait_for(in_own_thread(fails, "fails"), 10)


async def test_a_cancelled_wait_ignores_the_late_outcome() -> None:
    released = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        released.wait()
        finished.set()
        return "late"

    waiting = in_own_thread(slow, "slow")
    waiting.cancel()
    released.set()
    assert await asyncio.to_thread(finished.wait, 10)
    await asyncio.sleep(0.05)  # the thread's hand-over runs on the loop; it must not raise
    assert waiting.cancelled()
