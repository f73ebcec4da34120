"""The service functions the routers call instead of querying themselves (both databases)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agents.protocol import CheckpointSaved
from backend.checkpoints import service as checkpoints
from backend.db import ping
from backend.errors import NotFound
from backend.jobs import queries as jobs
from backend.jobs.spec import validate_spec
from backend.streams.models import MetricPoint
from backend.streams.series import metric_series
from tests.conftest import Api
from tests.support.factories import create_job, make_spec

DIRECTORY = Path("/checkpoints/job-1")  # only named in the rows' paths


async def submitted(api: Api) -> int:
    async with api.session() as session:
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        await session.commit()
        return job.id


async def test_find_task_by_name_with_its_job(api: Api) -> None:
    job_id = await submitted(api)
    async with api.session() as session:
        task = await jobs.find_task(session=session, job_id=job_id, task="worker:1")
        assert task is not None
        assert (task.name, task.job.id, task.job.spec["name"]) == ("worker:1", job_id, "digits-ps")
        for job, name in [(job_id, "worker:9"), (job_id, "evaluator:0"), (job_id + 1, "chief:0")]:
            assert await jobs.find_task(session=session, job_id=job, task=name) is None


async def test_a_reported_checkpoint_is_recorded_by_job_id_and_read_back(api: Api) -> None:
    job_id = await submitted(api)
    saved = CheckpointSaved(
        name="ckpt-1", step=10, epoch=1, size_bytes=10, wall_time=1.8e9, trigger="epoch"
    )
    async with api.session() as session:
        row = await checkpoints.record_reported_checkpoint(
            session=session,
            job_id=job_id,
            directory=DIRECTORY,
            task="chief:0",
            saved=saved,
        )
        await session.commit()
        assert (await checkpoints.get_checkpoint(session=session, checkpoint_id=row.id)) is row
        with pytest.raises(NotFound, match=f"checkpoint {row.id + 1} does not exist"):
            await checkpoints.get_checkpoint(session=session, checkpoint_id=row.id + 1)
        with pytest.raises(NotFound, match=f"job {job_id + 1} does not exist"):
            await checkpoints.record_reported_checkpoint(
                session=session,
                job_id=job_id + 1,
                directory=DIRECTORY,
                task="chief:0",
                saved=saved,
            )


async def test_metric_series_merge_attempts_filter_and_downsample(api: Api) -> None:
    job_id = await submitted(api)
    async with api.session() as session:
        rows = [
            # attempt 1 of the chief resumes at step 2, after attempt 0 reached step 3
            *[("chief:0", 0, s, "loss", float(s)) for s in range(4)],
            *[("chief:0", 1, s, "loss", float(10 + s)) for s in range(2, 6)],
            ("chief:0", 1, 6, "loss", math.nan),
            *[("worker:0", 0, s, "accuracy", s / 10) for s in range(3)],
        ]
        session.add_all(
            MetricPoint(
                job_id=job_id,
                task=task,
                attempt=attempt,
                seq=seq,
                name=name,
                step=step,
                value=value,
                wall_time=1.8e9 + seq,
            )
            for seq, (task, attempt, step, name, value) in enumerate(rows)
        )
        await session.commit()

        series = {(s.task, s.name): s for s in await metric_series(session=session, job_id=job_id)}
        loss = series[("chief:0", "loss")]
        assert loss.steps == [0, 1, 2, 2, 3, 3, 4, 5, 6]  # by step, then attempt
        assert loss.values[-1] is None  # NaN travels as null
        assert loss.total_points == 9

        only = await metric_series(
            session=session, job_id=job_id, names=["accuracy"], task="worker:0", since_step=1
        )
        assert [(s.task, s.name, s.steps) for s in only] == [("worker:0", "accuracy", [1, 2])]

        cut = await metric_series(session=session, job_id=job_id, names=["loss"], max_points=4)
        assert cut[0].total_points == 9 and len(cut[0].steps) <= 4


async def test_ping_names_the_database(api: Api, database_url: str) -> None:
    async with api.session() as session:
        assert await ping(session=session) == database_url.split(":")[0]
