"""Applies the task starts agents reported since the last pass, all in one transaction."""

from __future__ import annotations

from backend.scheduling.cluster import ClusterView
from backend.scheduling.start_reports import apply_reported_starts
from backend.scheduling.transaction import Transaction


class ReportedStarts:
    def __init__(self, *, view: ClusterView) -> None:
        self.view = view

    async def reconcile(self, tx: Transaction) -> None:
        await apply_reported_starts(tx, self.view, list(self.view.reported_starts))
