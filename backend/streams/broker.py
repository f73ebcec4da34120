"""In-process pub/sub for live frames. Publishing never waits on a subscriber.

Each subscriber has a bounded queue. One that falls too far behind is dropped with a reason
rather than slowing ingest or anyone else; every frame carries a cursor, so it reconnects and
resumes where it was, with the gap filled from history.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable, Iterable

# Streams publish ServerFrame models (backend/streams/frames.py); the broker carries anything.
Frame = object
QUEUE_FRAMES = 2_000


class SubscriberTooSlow(Exception):
    pass


class Subscription:
    def __init__(self, broker: Broker, topics: frozenset[str], limit: int) -> None:
        self._broker = broker
        self.topics = topics
        self._limit = limit
        self._frames: deque[Frame] = deque()
        self._ready = asyncio.Event()
        self.dropped: str | None = None

    def offer(self, frame: Frame) -> None:
        if self.dropped is not None:
            return
        if len(self._frames) >= self._limit:
            self.dropped = (
                f"subscriber fell {self._limit} frames behind; reconnect and resume from the "
                "last cursor"
            )
            self._frames.clear()
        else:
            self._frames.append(frame)
        self._ready.set()

    async def next(self) -> Frame:
        while not self._frames:
            if self.dropped is not None:
                raise SubscriberTooSlow(self.dropped)
            self._ready.clear()
            await self._ready.wait()
        if self.dropped is not None:
            raise SubscriberTooSlow(self.dropped)
        return self._frames.popleft()

    def pending(self) -> int:
        return len(self._frames)

    def close(self) -> None:
        self._broker.unsubscribe(self)


class StreamSlots:
    """How many streams each holder (a token) has open, so that one cannot open them all."""

    def __init__(self) -> None:
        self._open: dict[Hashable, int] = {}

    def take(self, holder: Hashable, limit: int) -> bool:
        """Count one more open stream for `holder`; False (and nothing counted) at the limit."""
        held = self._open.get(holder, 0)
        if held >= limit:
            return False
        self._open[holder] = held + 1
        return True

    def release(self, holder: Hashable) -> None:
        held = self._open.get(holder, 0) - 1
        if held > 0:
            self._open[holder] = held
        else:
            self._open.pop(holder, None)

    def held(self, holder: Hashable) -> int:
        return self._open.get(holder, 0)

    def total(self) -> int:
        """Streams open now, whoever holds them."""
        return sum(self._open.values())


class Broker:
    def __init__(self, queue_frames: int = QUEUE_FRAMES) -> None:
        self._by_topic: dict[str, set[Subscription]] = {}
        self.queue_frames = queue_frames
        self.streams = StreamSlots()  # the websockets that read from this broker, per token

    def subscribe(self, topics: Iterable[str]) -> Subscription:
        subscription = Subscription(self, frozenset(topics), self.queue_frames)
        for topic in subscription.topics:
            self._by_topic.setdefault(topic, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        for topic in subscription.topics:
            subscribers = self._by_topic.get(topic)
            if subscribers is not None:
                subscribers.discard(subscription)
                if not subscribers:
                    del self._by_topic[topic]

    def publish(self, topic: str, frame: Frame) -> None:
        for subscription in list(self._by_topic.get(topic, ())):
            subscription.offer(frame)

    def subscribers(self, topic: str) -> int:
        return len(self._by_topic.get(topic, ()))


def job_topic(job_id: int) -> str:
    return f"job:{job_id}"


CLUSTER_TOPIC = "cluster"
