"""Fixtures of the Slurm backend's tests: a real two-node Slurm cluster on this machine."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from backend.app import create_app
from backend.slurm.models import SlurmJob
from backend.slurm.reconcile import SlurmSync
from tests.conftest import ADMIN_TOKEN, Api, make_settings
from tests.support.slurm import SlurmCluster, slurm_cluster


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """Started once for the session (about a second) and stopped, with its jobs, at its end."""
    with slurm_cluster() as cluster:
        yield cluster


@dataclass
class SlurmServer:
    """The app with its Slurm backend on the test cluster; passes are run by the test."""

    api: Api
    sync: SlurmSync
    cluster: SlurmCluster
    agents_dir: Path  # what each stand-in agent saw, by node: <node>.args and <node>.env
    prefix: str  # of this server's Slurm job names: each test's jobs have their own

    def name(self, job_id: int) -> str:
        return f"{self.prefix}-{job_id}"

    async def passes(self, count: int = 1) -> None:
        for _ in range(count):
            await self.sync.reconcile_once()

    async def job(self, job_id: int) -> dict[str, Any]:
        answer = await self.api.http.get(f"/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        job: dict[str, Any] = answer.json()
        return job

    async def record(self, job_id: int) -> SlurmJob:
        async with self.api.session() as session:
            record = await session.scalar(select(SlurmJob).where(SlurmJob.job_id == job_id))
            assert record is not None, f"job {job_id} has no Slurm record"
            return record

    def named(self, job_id: int) -> list[str]:
        """The ids of the Slurm jobs squeue lists under this job's name."""
        shown = self.cluster.run(
            "squeue", "--noheader", "--states=all", f"--name={self.name(job_id)}", "--format=%i"
        )
        return shown.stdout.split()


# The agent the batch script starts on each node, until agents take --bound-job: it writes
# down its arguments and environment, then waits like an agent (until Slurm ends the job).
STAND_IN_AGENT = (
    '/bin/sh -c \'printf "%s\\n" "$@" > {dir}/$SLURMD_NODENAME.args; '
    # The env file appears whole (a test waits for it to exist, then reads it).
    "env > {dir}/$SLURMD_NODENAME.part; mv {dir}/$SLURMD_NODENAME.part {dir}/$SLURMD_NODENAME.env; "
    "exec sleep 600' agent"
)


@pytest.fixture
async def server(slurm: SlurmCluster, tmp_path: Path) -> AsyncIterator[SlurmServer]:
    agents_dir = slurm.root / f"agents-{tmp_path.name}"
    agents_dir.mkdir()
    # Job ids start at 1 in every test's database; Slurm keeps ended jobs listed a while.
    prefix = f"t{secrets.token_hex(4)}"
    settings = make_settings(
        f"sqlite:///{tmp_path / 'strata.db'}",
        tmp_path / "data",
        slurm_enabled=True,
        slurm_job_prefix=prefix,
        slurm_conf=slurm.conf,
        slurm_accounting="completion",
        slurm_agent_command=STAND_IN_AGENT.format(dir=agents_dir),
        slurm_output_dir=slurm.root / "log",
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        # The test runs every pass itself: the loop would race it (a submission wakes it).
        for task in asyncio.all_tasks():
            if task.get_name() == "slurm":
                task.cancel()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://strata.test",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        ) as http:
            yield SlurmServer(Api(http=http, app=app), app.state.slurm, slurm, agents_dir, prefix)
    # Whatever a test left in Slurm's queue goes before the next test.
    slurm.run("scancel", "--full", f"--partition={slurm.partition}", check=False)
