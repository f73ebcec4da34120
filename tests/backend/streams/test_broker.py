"""The broker never waits on a subscriber; a slow one is dropped with a reason."""

from __future__ import annotations

import asyncio

import pytest

from backend.streams.broker import Broker, SubscriberTooSlow
from backend.streams.cursor import Cursor, InvalidCursor
from backend.streams.downsample import min_max_indices


async def test_fan_out_to_topics() -> None:
    broker = Broker()
    job, everything = broker.subscribe(["job:1"]), broker.subscribe(["job:1", "cluster"])
    broker.publish("job:1", {"n": 1})
    broker.publish("cluster", {"n": 2})
    broker.publish("job:2", {"n": 3})
    assert await job.next() == {"n": 1}
    assert [await everything.next(), await everything.next()] == [{"n": 1}, {"n": 2}]
    assert job.pending() == 0
    job.close()
    assert broker.subscribers("job:1") == 1


async def test_a_slow_subscriber_is_dropped_and_others_are_not_slowed() -> None:
    broker = Broker(queue_frames=10)
    slow, fast = broker.subscribe(["job:1"]), broker.subscribe(["job:1"])
    for n in range(25):
        broker.publish("job:1", {"n": n})  # never blocks, however far behind `slow` is
        assert await asyncio.wait_for(fast.next(), 1) == {"n": n}
    with pytest.raises(SubscriberTooSlow, match="fell 10 frames behind"):
        await slow.next()


async def test_next_waits_for_a_frame() -> None:
    broker = Broker()
    subscription = broker.subscribe(["t"])
    waiting = asyncio.create_task(subscription.next())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    broker.publish("t", {"x": 1})
    assert await asyncio.wait_for(waiting, 1) == {"x": 1}


def test_cursor_round_trip_and_garbage() -> None:
    cursor = Cursor(event=7, metrics={"chief:0.0": 41}, logs={"worker:1.2": 300})
    assert Cursor.decode(cursor.encode()) == cursor
    assert Cursor.decode(None) == Cursor()
    for bad in ["%%%", "e30", "eyJlIjogIngifQ"]:  # not base64, {} and {"e": "x"}
        with pytest.raises(InvalidCursor):
            Cursor.decode(bad)


def test_downsampling() -> None:
    assert min_max_indices([1.0, 2.0, 3.0], 10) == [0, 1, 2]
    values: list[float | None] = [float(i % 7) for i in range(1000)]
    values[500] = -100.0
    values[600] = None
    kept = min_max_indices(values, 50)
    assert len(kept) <= 50 and kept == sorted(kept)
    assert 500 in kept
    assert min_max_indices([None] * 10, 4) == [0, 5]
