"""Moving a slow parameter_server worker to another host (a spec's `stragglers: restart`).

The least disruptive move that TensorFlow allows. Under ParameterServerStrategy the
coordinator (the chief) reaches its workers by the addresses in its TF_CONFIG, read once at
its start, so a worker at a new host:port needs a new chief; nothing else does:

* the worker's next attempt is placed on another host with room (its current host left out:
  whatever slows it there, a noisy neighbour or a failing part, would slow it again), with a
  port and GPUs there; it starts once its old attempt has stopped;
* the chief restarts in place with the new cluster in its TF_CONFIG and resumes from its
  backup; the ps keep serving (they never call the workers) and the other workers keep
  running (the new chief connects to them, as after a ps's restart);
* every training task's TF_CONFIG names the new address, so that a later restart in place of
  any of them starts with the cluster as it is.

The job goes `restarting` until the chief and the worker run again. It is a restart, counted
in `restart_count` and the attempts, not a failure: the policy's budget and backoff are for
failures. When no other host has room (or the job cannot be moved at all) nothing changes and
the caller only reports. Service functions: they take the Transaction, flush, never commit.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.vocabulary import Role, Strategy
from backend.db import utcnow
from backend.hosts.models import Host
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.jobs.tfconfig import TaskAddresses, cluster_spec, tf_config
from backend.scheduling.executors import PassHosts
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.placement import TaskNeed, Unplaceable, place
from backend.scheduling.restarts import restart_in_place
from backend.scheduling.transaction import Transaction


@dataclass(frozen=True)
class Moved:
    to_host: str


@dataclass(frozen=True)
class NotMoved:
    why: str  # "no other host has room: ..."


def refusal(job: Job, tasks: list[Task], worker: Task) -> str | None:
    """Why this worker cannot be moved, if it cannot (before looking for room)."""
    spec = job.job_spec
    if job.strategy != Strategy.parameter_server or worker.role != Role.worker:
        return "only a parameter_server worker can be moved"
    if spec.coordinator != "chief":
        return "its coordinator is the client's process, which Strata cannot restart"
    if job.status is not JobStatus.running:
        return f"the job is {job.status.value}"
    if worker.host is None or worker.status not in LIVE_TASK_STATUSES:
        return f"{worker.name} is not running"
    chief = next((t for t in tasks if t.role == Role.chief), None)
    if chief is None or chief.host is None:
        return "the job has no placed chief"
    return None


async def move_worker(
    *, tx: Transaction, job: Job, tasks: list[Task], worker: Task, reason: str
) -> Moved | NotMoved:
    """Move `worker` to another host and restart the chief with the new cluster (see the
    module), or say why not and change nothing. `reason`: what the job's event says."""
    refused = refusal(job, tasks, worker)
    if refused is not None:
        return NotMoved(refused)
    assert worker.host is not None
    session = tx.session
    spec = job.job_spec
    capacity = await tx.agents.capacities(session)
    usable = tx.executors.for_job(spec).hosts_for(job.id, spec, PassHosts.of(capacity, tx.agents))
    others = [host for host in usable or [] if host.host_id != worker.host_id]
    if not others:
        return NotMoved("no other host takes its tasks now")
    need = TaskNeed(worker.role, worker.index, spec.replicas.of(Role.worker).gpus)
    slots = place([need], others, image=spec.image)
    if isinstance(slots, Unplaceable):
        return NotMoved(f"no other host has room: {slots.reason}")
    slot = slots[(worker.role, worker.index)]
    from_host = worker.host.name

    job.restart_count += 1
    chief = next(t for t in tasks if t.role == Role.chief)
    await transition_job(
        session=session,
        job=job,
        to=JobStatus.restarting,
        reason=f"{reason}; restarting {chief.name} with the new cluster",
        data={"moved": worker.name, "from": from_host, "to": slot.host_name},
    )
    tx.stop(from_host, worker.key, reason, force=True)
    worker.attempt += 1
    worker.status = TaskStatus.scheduled
    # The relationship, not only the key: a later reconciler of this pass reads task.host.
    worker.host = await session.get_one(Host, slot.host_id)
    worker.port, worker.gpu_indices = slot.port, list(slot.gpus)
    worker.pid = worker.exit_code = None
    worker.started_at = worker.finished_at = None
    worker.restart_after = utcnow()  # started by RestartedTasks once the old attempt is gone
    addresses = dict(_addresses(tasks))
    addresses[(worker.role, worker.index)] = f"{slot.address}:{slot.port}"
    cluster = cluster_spec(addresses)
    for task in tasks:
        if task.role != Role.evaluator and task.tf_config is not None:
            task.tf_config = tf_config(addresses, task.role, task.index, cluster=cluster)
    restart_in_place(tx=tx, task=chief, delay=0, reason=reason, failure=False)
    tx.observe(lambda metrics: metrics.restarts.labels(cause="straggler").inc())
    await session.flush()
    return Moved(slot.host_name)


def _addresses(tasks: list[Task]) -> TaskAddresses:
    """Each placed training task's address, as its TF_CONFIG has it."""
    found: dict[tuple[str, int], str] = {}
    for task in tasks:
        if task.role == Role.evaluator or task.tf_config is None:
            continue
        found[(task.role, task.index)] = task.tf_config["cluster"][task.role][task.index]
    return found
