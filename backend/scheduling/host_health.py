"""Applying what hosts' health reports and their tasks' failures say: a fault or too many
infrastructure failures cordon the host (backend.hosts.health has the rules), and the jobs on
a GPU that was lost are re-placed as a lost host's are.

Service functions: keyword-only, they take the change's Transaction, flush and never commit.
Each automatic cordon is written to the audit trail with its evidence, by "strata".
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select

from agents.protocol import HealthFault
from backend.audit.actions import AuditAction
from backend.audit.models import AuditEntry
from backend.db import utcnow
from backend.hosts import cordons, health
from backend.hosts.health import CordonCause
from backend.hosts.models import Host
from backend.jobs.models import Job, Task
from backend.jobs.states import ACTIVE_JOB_STATUSES, LIVE_TASK_STATUSES, JobStatus
from backend.scheduling import restarts
from backend.scheduling.health_notes import Findings, signature
from backend.scheduling.task_events import end_job
from backend.scheduling.transaction import Transaction

log = logging.getLogger(__name__)

ACTOR = "strata"  # who the audit trail names for what the server decided by itself


async def apply_findings(*, tx: Transaction, host: Host, findings: Findings) -> bool:
    """Store what the host's report found; cordon it for faults an operator has not
    acknowledged; re-place the jobs on a lost GPU. Returns whether it was cordoned now."""
    faults, warnings = findings.faults, findings.warnings
    before = health.loaded(host.faults), health.loaded(host.warnings)
    if (signature(before[0]), signature(before[1])) != (signature(faults), signature(warnings)):
        host.faults_since = utcnow()
    host.faults, host.warnings = health.stored(faults), health.stored(warnings)
    acknowledged = health.still_acknowledged(health.loaded(host.acknowledged_faults), faults)
    host.acknowledged_faults = health.stored(acknowledged)
    await replace_jobs_on_lost_gpus(tx=tx, host=host, faults=faults)
    fresh = health.new_faults(faults, acknowledged)
    if not fresh:
        return False
    return record_cordon(
        tx=tx,
        host=host,
        reason=health.cordon_reason(fresh),
        cause=CordonCause.fault,
        evidence={"faults": health.stored(fresh)},
    )


def record_cordon(
    *, tx: Transaction, host: Host, reason: str, cause: CordonCause, evidence: dict[str, Any]
) -> bool:
    """Cordon the host by the server's own decision, unless it is already; audited."""
    if not cordons.cordon(host, reason=reason, cause=cause):
        return False
    log.warning("host %s cordoned: %s", host.name, reason)
    tx.session.add(
        AuditEntry(
            actor=ACTOR,
            action=AuditAction.host_cordon.value,
            target=f"host {host.name}",
            detail={"cause": cause.value, "reason": reason, **evidence},
        )
    )
    return True


async def replace_jobs_on_lost_gpus(
    *, tx: Transaction, host: Host, faults: list[HealthFault]
) -> None:
    """A task on a GPU that fell off the bus cannot go on there: its job is re-placed as a
    lost host's is (or fails, its restarts spent). The host's other tasks go on."""
    lost = {f.device for f in faults if f.kind == "gpu_lost" and f.device is not None}
    if not lost:
        return
    session = tx.session
    tasks = await session.scalars(
        select(Task).where(Task.host_id == host.id, Task.status.in_(LIVE_TASK_STATUSES))
    )
    jobs = sorted({t.job_id for t in tasks if lost & set(t.gpu_indices or [])})
    for job_id in jobs:
        job = await session.get_one(Job, job_id)
        if job.status not in ACTIVE_JOB_STATUSES:
            continue
        gpus = ", ".join(str(i) for i in sorted(lost))
        reason = f"GPU {gpus} of {host.name} was lost"
        decision = await restarts.after_host_lost(tx=tx, job=job, reason=reason)
        if not decision.restarted:
            await end_job(tx=tx, job=job, status=JobStatus.failed, reason=decision.reason)


async def cordon_for_failures(
    *, tx: Transaction, host: Host, failures: list[dict[str, Any]], minutes: float
) -> bool:
    reason = f"{len(failures)} infrastructure failures in {minutes:g} min"
    return record_cordon(
        tx=tx, host=host, reason=reason, cause=CordonCause.failures, evidence={"failures": failures}
    )
