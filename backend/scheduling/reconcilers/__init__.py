"""The controller's reconcilers: each compares one aspect of desired and actual state and
decides what to change, inside the pass's transaction. They run in the order the controller
lists them; none commits, and none sends a command before the pass has committed."""

from __future__ import annotations

from typing import Protocol

from backend.scheduling.transaction import Transaction


class Reconciler(Protocol):
    async def reconcile(self, tx: Transaction) -> None: ...
