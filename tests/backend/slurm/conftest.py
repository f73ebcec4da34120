"""Fixtures of the Slurm backend's tests: a real two-node Slurm cluster on this machine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.slurm import SlurmCluster, slurm_cluster


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """Started once for the session (about a second) and stopped, with its jobs, at its end."""
    with slurm_cluster() as cluster:
        yield cluster
