"""Which task is asked to write a checkpoint now, and the 409s that say why none can (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from backend.checkpoints.service import checkpoint_writer
from backend.errors import Conflict
from backend.jobs.models import Job, JobClient, Task
from backend.jobs.states import JobStatus, TaskStatus
from tests.support.factories import make_spec


def job(strategy: str, *tasks: str, status: JobStatus = JobStatus.running) -> Job:
    return Job(
        id=7,
        strategy=strategy,
        status=status,
        tasks=[
            Task(role=name.split(":")[0], index=int(name.split(":")[1]), status=TaskStatus.running)
            for name in tasks
        ],
    )


@pytest.mark.parametrize(
    ("strategy", "tasks", "writer"),
    [
        ("parameter_server", ("worker:0", "ps:0", "chief:0", "evaluator:0"), "chief:0"),
        ("mirrored", ("evaluator:0", "worker:0"), "worker:0"),
        ("mirrored", ("chief:0",), "chief:0"),
    ],
)
def test_the_chief_writes_else_the_one_training_task(
    strategy: str, tasks: tuple[str, ...], writer: str
) -> None:
    assert checkpoint_writer(job(strategy, *tasks)).name == writer


@pytest.mark.parametrize(
    "status", [s for s in JobStatus if s is not JobStatus.running], ids=lambda s: s.value
)
def test_only_a_running_job_is_asked(status: JobStatus) -> None:
    with pytest.raises(Conflict, match=f"job 7 is {status.value}; a checkpoint can be taken only"):
        checkpoint_writer(job("parameter_server", "chief:0", "worker:0", "ps:0", status=status))


def test_multi_worker_mirrored_saves_only_at_epoch_ends() -> None:
    with pytest.raises(Conflict, match="workers save together, at epoch ends"):
        checkpoint_writer(job("multi_worker_mirrored", "chief:0", "worker:0", "worker:1"))


def test_an_evaluator_never_writes() -> None:
    with pytest.raises(Conflict, match="job 7 has no task that writes checkpoints"):
        checkpoint_writer(job("mirrored", "evaluator:0"))


def test_a_client_coordinator_writes_in_a_job_whose_coordinator_is_the_client() -> None:
    spec = make_spec(
        "parameter_server",
        coordinator="client",
        entrypoint=[],
        replicas={"worker": {"count": 2}, "ps": {"count": 1}},
    )
    client_job = job("parameter_server", "worker:0", "worker:1", "ps:0")
    client_job.spec = spec
    with pytest.raises(Conflict, match="coordinator is the client, and none is attached"):
        checkpoint_writer(client_job)
    now = datetime.now(UTC)
    client = JobClient(job_id=7, session=3, host="laptop", pid=1, attached_at=now, seen_at=now)
    assert checkpoint_writer(client_job, client) == ("chief:0", 3)
    client.detached_at = now
    with pytest.raises(Conflict, match="none is attached"):
        checkpoint_writer(client_job, client)
