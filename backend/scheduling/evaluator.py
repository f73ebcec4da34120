"""Starting and stopping a job's sidecar evaluator by request.

The evaluator is outside the training cluster (its TF_CONFIG names only itself), so it can
come and go while the job trains: starting it places one task on any host with room; stopping
it ends that task and nothing else. A spec with `evaluator.count: 1` starts it with the job.
Service functions: they take the change's Transaction, flush and never commit.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import select

from agents.vocabulary import Role, format_task_name
from backend.db import utcnow
from backend.errors import Conflict, NotFound
from backend.jobs.actions import EVALUATOR_STARTABLE, PLACED, evaluator_active
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, TaskStatus
from backend.jobs.tfconfig import tf_config
from backend.scheduling.placement import TaskNeed, Unplaceable, place
from backend.scheduling.transaction import Transaction

EVALUATOR = (Role.evaluator, 0)
EVALUATOR_NAME = format_task_name(*EVALUATOR)


async def request_evaluator(
    tx: Transaction, *, job_id: int, action: Literal["start", "stop"]
) -> None:
    job = await tx.session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    tasks = list(await tx.session.scalars(select(Task).where(Task.job_id == job_id)))
    evaluator = next((t for t in tasks if (t.role, t.index) == EVALUATOR), None)
    if action == "start":
        await _start(tx, job, evaluator)
    else:
        await _stop(tx, job, evaluator)


async def _start(tx: Transaction, job: Job, evaluator: Task | None) -> None:
    session = tx.session
    if job.status not in EVALUATOR_STARTABLE:
        raise Conflict(f"job {job.id} is {job.status.value}; it has nothing left to evaluate")
    spec = job.job_spec
    if not spec.checkpoint.saves:
        raise Conflict(
            f"job {job.id} writes no checkpoints (checkpoint.every_epochs and every_seconds "
            "are null), so a sidecar evaluator would have nothing to evaluate"
        )
    if evaluator is not None and evaluator_active(evaluator):
        raise Conflict(f"the evaluator of job {job.id} is already {evaluator.status.value}")
    if evaluator is None:
        evaluator = Task(
            job_id=job.id, role=Role.evaluator, index=0, status=TaskStatus.pending, gpu_indices=[]
        )
        session.add(evaluator)
    else:
        evaluator.attempt += 1
        evaluator.status = TaskStatus.pending
        evaluator.host_id = evaluator.port = evaluator.pid = evaluator.exit_code = None
        evaluator.gpu_indices, evaluator.tf_config = [], None
        evaluator.started_at = evaluator.finished_at = evaluator.restart_after = None
    if job.status not in PLACED:
        # A pending job: the evaluator is placed with the rest of it.
        await session.flush()
        await record_event(
            session=session,
            job=job,
            kind=EventKind.evaluator,
            task=EVALUATOR_NAME,
            message="sidecar evaluator requested; it starts when the job is placed",
        )
        return
    slots = place(
        [TaskNeed(*EVALUATOR, spec.replicas.evaluator.gpus)],
        await tx.agents.capacities(session),
        image=spec.image,
    )
    if isinstance(slots, Unplaceable):
        raise Conflict(f"no host has room for the evaluator of job {job.id}: {slots.reason}")
    slot = slots[EVALUATOR]
    evaluator.host_id, evaluator.port, evaluator.gpu_indices = (
        slot.host_id,
        slot.port,
        list(slot.gpus),
    )
    evaluator.tf_config = tf_config({EVALUATOR: f"{slot.address}:{slot.port}"}, *EVALUATOR)
    evaluator.status = TaskStatus.scheduled
    await session.flush()
    tx.start(slot.host_name, job, evaluator, force=True)
    await record_event(
        session=session,
        job=job,
        kind=EventKind.evaluator,
        task=EVALUATOR_NAME,
        message=f"sidecar evaluator started on {slot.host_name} (attempt {evaluator.attempt})",
        data={"to": "scheduled", "attempt": evaluator.attempt, "host": slot.host_name},
    )


async def _stop(tx: Transaction, job: Job, evaluator: Task | None) -> None:
    session = tx.session
    if evaluator is None or not evaluator_active(evaluator):
        raise Conflict(f"job {job.id} has no sidecar evaluator running")
    if evaluator.status in LIVE_TASK_STATUSES and evaluator.host is not None:
        tx.stop(evaluator.host.name, evaluator.key, "evaluator stopped by request", force=True)
    # Stopped at once: its exit, when the agent reports it, is then no news (not a failure).
    evaluator.status, evaluator.finished_at = TaskStatus.stopped, utcnow()
    await record_event(
        session=session,
        job=job,
        kind=EventKind.evaluator,
        task=EVALUATOR_NAME,
        message="sidecar evaluator stopped by request",
        data={"to": "stopped", "attempt": evaluator.attempt},
    )
