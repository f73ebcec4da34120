"""Writes down when each agent was last heard from, for every host heard since, at once."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import cast

from sqlalchemy import Table, bindparam, update

from backend.db import utcnow
from backend.hosts.models import Host
from backend.jobs.cluster_changes import note_heartbeats
from backend.scheduling.cluster import ClusterView
from backend.scheduling.pace import HeartbeatPace
from backend.scheduling.transaction import Transaction

_HOSTS = cast(Table, Host.__table__)
# One statement run for every host heard, by its unique name. Core, not the ORM's bulk
# UPDATE: that prepares each row in Python, on the event loop every request shares.
_WRITE_TIME = (
    update(_HOSTS)
    .where(_HOSTS.c.name == bindparam("host_name"))
    .values(last_heartbeat_at=bindparam("heard_at"))
)


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
        note_heartbeats(tx.session)
        # A host forgotten since it was heard matches no row, and is written nowhere.
        await tx.session.execute(
            _WRITE_TIME,
            [
                {
                    "host_name": name,
                    "heard_at": now_wall - timedelta(seconds=now - view.last_heard.get(name, now)),
                }
                for name in heard
            ],
        )
