"""HostHealthChecks: applies the health reports that changed since the last pass (faults
cordon their host) and cordons hosts whose tasks failed for infrastructure causes too often
(STRATA_HOST_FAILURE_CORDON_COUNT within STRATA_HOST_FAILURE_CORDON_MINUTES). A pass with
nothing new reads nothing."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from backend.config import Settings
from backend.hosts.models import Host
from backend.scheduling.cluster import ClusterView
from backend.scheduling.health_notes import HealthNotes
from backend.scheduling.host_health import apply_findings, cordon_for_failures
from backend.scheduling.transaction import Transaction


class HostHealthChecks:
    def __init__(self, *, notes: HealthNotes, view: ClusterView, settings: Settings) -> None:
        self.notes = notes
        self.view = view
        self.settings = settings

    async def reconcile(self, tx: Transaction) -> None:
        settings = self.settings
        reports = self.notes.take_reports()
        minutes = settings.host_failure_cordon_minutes
        tripped = self.notes.tripped(settings.host_failure_cordon_count, minutes)
        if not reports and not tripped:
            return
        tx.after_commit.append(self.notes.applied)
        names = set(reports) | set(tripped)
        hosts = await tx.session.scalars(
            select(Host).where(Host.name.in_(names)).options(selectinload(Host.devices))
        )
        # A cordoned host takes nothing new, a lost GPU's tasks leave: placement reads again.
        self.view.capacity_changed()
        for host in hosts:
            if (findings := reports.get(host.name)) is not None:
                await apply_findings(tx=tx, host=host, findings=findings)
            if (failures := tripped.get(host.name)) is not None:
                await cordon_for_failures(tx=tx, host=host, failures=failures, minutes=minutes)
