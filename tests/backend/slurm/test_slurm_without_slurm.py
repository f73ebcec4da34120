"""What the rest of the server does with jobs that ask for Slurm: a server without the Slurm
backend refuses them, and Strata's own placement never puts them on its agents."""

from __future__ import annotations

from backend.jobs.states import JobStatus
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from tests.backend.scheduling.reconcilers.conftest import World, world  # noqa: F401 - the fixture
from tests.conftest import Api
from tests.support.factories import make_spec


async def test_a_server_without_slurm_refuses_a_slurm_job_naming_the_setting(api: Api) -> None:
    answer = await api.http.post("/jobs", json=make_spec("mirrored", slurm={}))
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == [
        {
            "field": "slurm",
            "message": "this server runs no Slurm backend: its administrator enables it with "
            "STRATA_SLURM_ENABLED=1 (see docs/slurm.md)",
        }
    ]


async def test_native_placement_leaves_slurm_jobs_to_slurm(world: World) -> None:  # noqa: F811
    await world.host("host-a", gpus=2)
    slurm_job = await world.job("mirrored", slurm={"partition": "gpu"})
    native_job = await world.job("mirrored")
    outbox = await world.run(PendingJobs(view=world.view, wake=lambda: None))
    assert (await world.load(native_job)).status is JobStatus.scheduled
    waiting = await world.load(slurm_job)
    # Untouched: the Slurm backend gives it Slurm's reason once submitted.
    assert (waiting.status, waiting.reason) == (JobStatus.pending, "waiting to be placed")
    assert {message.key.job_id for _, message in outbox.messages} == {native_job}  # type: ignore[union-attr]
