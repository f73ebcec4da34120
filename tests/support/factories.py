"""Factories for specs and rows, so that each test says only what matters to it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from agents.runtime_environment import EngineInfo
from backend.cluster.service import DeviceInfo, register_host
from backend.hosts.models import Host
from backend.jobs.models import Job
from backend.jobs.spec import JobSpec
from backend.scheduling.new_jobs import NewJob, insert_jobs
from backend.teams.service import default_project

BASE_SPECS: dict[str, dict[str, Any]] = {
    "parameter_server": {
        "name": "digits-ps",
        "strategy": "parameter_server",
        "entrypoint": ["python", "examples/digits.py", "--epochs", "2"],
        "replicas": {"chief": {"count": 1}, "worker": {"count": 2}, "ps": {"count": 1}},
    },
    "multi_worker_mirrored": {
        "name": "digits-mwm",
        "strategy": "multi_worker_mirrored",
        "entrypoint": ["python", "examples/digits.py"],
        "replicas": {"worker": {"count": 2}},
    },
    "mirrored": {
        "name": "digits-mirrored",
        "strategy": "mirrored",
        "entrypoint": ["python", "examples/digits.py"],
        "replicas": {"chief": {"count": 1, "gpus": 1}},
    },
}


def make_spec(base: str = "parameter_server", /, **overrides: Any) -> dict[str, Any]:
    """A valid spec document for the base strategy, with top-level fields replaced."""
    spec = copy.deepcopy(BASE_SPECS[base])
    spec.update(overrides)
    return spec


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def digits_spec(
    example: str, *, epochs: int, steps_per_epoch: int, name: str | None = None
) -> dict[str, Any]:
    """One of examples/digits_*.yaml, training for this many epochs of this many steps."""
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / example).read_text())
    if name is not None:
        spec["name"] = name
    spec["entrypoint"] = [
        "python",
        "examples/digits.py",
        "--epochs",
        str(epochs),
        "--steps-per-epoch",
        str(steps_per_epoch),
    ]
    return spec


def sleeper_spec(name: str, restart: dict[str, Any] | None = None) -> dict[str, Any]:
    """A one-task job whose process sleeps: cheap to start, and alive until it is stopped."""
    spec: dict[str, Any] = {
        "name": name,
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", "import time; time.sleep(600)"],
        "replicas": {"chief": {"count": 1, "gpus": 0}},
    }
    if restart is not None:
        spec["restart"] = restart
    return spec


def make_sweep_spec(**overrides: Any) -> dict[str, Any]:
    """A valid sweep spec: a mirrored job searched over lr and units, top-level fields
    replaced."""
    job = make_spec("mirrored")
    job["entrypoint"] = ["python", "train.py", "--lr", "${params.lr}"]
    job["env"] = {"UNITS": "${params.units}"}
    doc: dict[str, Any] = {
        "name": "search",
        "job": job,
        "parameters": {
            "lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
            "units": {"type": "categorical", "choices": [16, 32, 64]},
        },
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "budget": {"trials": 4, "parallel": 2, "max_failed": 1},
        "sampler": {"type": "random", "seed": 3},
        "early_stopping": {"type": "asha", "min_resource": 1, "reduction_factor": 2},
    }
    doc.update(overrides)
    return doc


async def make_host(
    session: AsyncSession,
    name: str = "host-a",
    *,
    gpus: int = 2,
    address: str = "127.0.0.1",
    port_range: tuple[int, int] = (42000, 42099),
    identity: str | None = None,
    engine: EngineInfo | None = None,
) -> Host:
    devices = [DeviceInfo(index=i, name="Simulated GPU", simulated=True) for i in range(gpus)]
    return await register_host(
        session=session,
        name=name,
        address=address,
        port_range=port_range,
        devices=devices,
        identity=identity,
        engine=engine,
    )


async def create_job(
    *,
    session: AsyncSession,
    spec: JobSpec,
    project_id: int | None = None,
    submitted_by: str | None = None,
) -> Job:
    """Store a validated job as pending, as a submission does (insert_jobs, without the
    intake's batching), in the given project (`default` when none is given); the job with
    its tasks loaded."""
    if project_id is None:
        project_id = (await default_project(session=session)).id
    [read] = await insert_jobs(
        session=session, jobs=[NewJob(spec=spec, project_id=project_id, submitted_by=submitted_by)]
    )
    return await session.get_one(Job, read.id, options=[selectinload(Job.tasks)])
