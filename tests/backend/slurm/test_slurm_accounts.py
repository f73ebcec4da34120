"""A project maps to a Slurm account: a Slurm job whose spec names no account is charged to
its project's `slurm_account` (Slurm's own limits for that account apply; Strata's quotas do
not), the spec's account wins, and the server's default comes last."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from backend.config import Settings
from backend.jobs.models import Job
from backend.jobs.spec import validate_spec
from backend.slurm.script import sbatch_options
from backend.teams.models import Project
from tests.backend.slurm.conftest import SlurmServer
from tests.backend.slurm.test_slurm_backend import PS_JOB, submit, wait_for
from tests.support.factories import make_spec


def account(slurm: dict[str, str], project_account: str | None) -> list[str]:
    options = sbatch_options(
        settings=Settings(slurm_account="server-default"),
        job_id=1,
        spec=validate_spec(make_spec("parameter_server", slurm=slurm)),
        name="strata-1",
        marker="m",
        project_account=project_account,
    )
    return [option for option in options if option.startswith("--account=")]


def test_the_specs_account_then_the_projects_then_the_servers() -> None:
    assert account({"account": "own"}, "vision-acct") == ["--account=own"]
    assert account({}, "vision-acct") == ["--account=vision-acct"]
    assert account({}, None) == ["--account=server-default"]


@pytest.mark.slow  # real Slurm daemons
async def test_sbatch_charges_a_job_to_its_projects_account(server: SlurmServer) -> None:
    job_id = await submit(server, PS_JOB)  # PS_JOB's slurm section names no account
    async with server.api.session() as session:
        project = Project(name="vision", slurm_account="vision-acct")
        session.add(project)
        await session.flush()
        await session.execute(update(Job).where(Job.id == job_id).values(project_id=project.id))
        await session.commit()
    job = await wait_for(server, job_id, "submitted", lambda j: j["slurm_job_id"] is not None)
    shown = server.cluster.run("scontrol", "show", "job", job["slurm_job_id"]).stdout
    assert "Account=vision-acct " in shown, shown
