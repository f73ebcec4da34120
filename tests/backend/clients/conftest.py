"""The reconcilers' world (a real database, placed and running jobs, no processes)."""

from tests.backend.scheduling.reconcilers.conftest import world

__all__ = ["world"]
