"""Writes down when each agent was last heard from, for every host heard since, at once."""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import select, update

from backend.db import utcnow
from backend.hosts.changes import note_heartbeats
from backend.hosts.models import Host
from backend.scheduling.cluster import ClusterView
from backend.scheduling.pace import HeartbeatPace
from backend.scheduling.transaction import Transaction


class HeartbeatTimes:
    def __init__(self, *, view: ClusterView, pace: HeartbeatPace) -> None:
        self.view = view
        self.pace = pace

    async def reconcile(self, tx: Transaction) -> None:
        view = self.view
        heard = view.heard_since_recorded
        now = time.monotonic()
        # At most once per heartbeat period: a thousand rows written on every pass held
        # SQLite's write lock for much of the time.
        if not heard or now - view.heartbeats_recorded_at < self.pace.seconds:
            return
        view.heartbeats_recorded_at = now
        view.heard_since_recorded = set()
        now_wall = utcnow()
        rows = await tx.session.execute(select(Host.name, Host.id).where(Host.name.in_(heard)))
        note_heartbeats(tx.session)
        await tx.session.execute(
            update(Host),
            [
                {
                    "id": host_id,
                    "last_heartbeat_at": now_wall
                    - timedelta(seconds=now - view.last_heard.get(name, now)),
                }
                for name, host_id in rows.all()
            ],
        )
