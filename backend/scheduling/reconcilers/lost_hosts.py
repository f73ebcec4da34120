"""Marks hosts that stopped sending heartbeats as lost, and re-places or ends their jobs."""

from __future__ import annotations

import logging
import time

from sqlalchemy import select

from backend.hosts.models import Host
from backend.hosts.states import HostStatus
from backend.scheduling import task_events
from backend.scheduling.cluster import ClusterView
from backend.scheduling.pace import HeartbeatPace
from backend.scheduling.transaction import Transaction

log = logging.getLogger(__name__)

RECONNECT_CEILING_SECONDS = 10.0  # agents.host.channel.Backoff's ceiling
# Every online host's name is read at most this often: a host is lost within this much of
# its timeout, and passes placing jobs (up to twenty a second) do not read a thousand names
# each time.
CHECK_EVERY_SECONDS = 1.0


class LostHosts:
    def __init__(self, *, view: ClusterView, pace: HeartbeatPace) -> None:
        self.view = view
        self.pace = pace
        self.checked_at = -CHECK_EVERY_SECONDS  # monotonic time of the last read

    def startup_grace(self) -> float:
        """After a server (re)start, agents need time to notice and reconnect (their backoff
        tops out at 10 s) before silence means a host is gone."""
        return self.pace.timeout_seconds + RECONNECT_CEILING_SECONDS

    async def reconcile(self, tx: Transaction) -> None:
        view, timeout = self.view, self.pace.timeout_seconds
        now = time.monotonic()
        if now - view.started < self.startup_grace() or now - self.checked_at < CHECK_EVERY_SECONDS:
            return
        self.checked_at = now
        online = await tx.session.scalars(select(Host.name).where(Host.status == HostStatus.online))
        # Not heard from since this server started (and the grace is over): silent too.
        silent = [n for n in online if now - view.last_heard.get(n, view.started) > timeout]
        if not silent:
            return
        view.capacity_changed()
        for host in await tx.session.scalars(select(Host).where(Host.name.in_(silent))):
            host.status = HostStatus.lost
            view.forget(host.name)
            log.warning("host %s lost: no heartbeat for %.0fs", host.name, timeout)
            await task_events.mark_host_lost(
                tx=tx,
                host=host,
                reason=f"host {host.name} was lost (no heartbeat for {timeout:.0f}s)",
            )
