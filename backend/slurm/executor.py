"""Jobs whose spec has a Slurm section, as the scheduling seam sees them (an Executor).

Their tasks go on the agents started in their own Slurm allocation, once every node's agent
has joined; until then the job shows Slurm's reason for the wait (backend.slurm.reconcile).
Project GPU quotas leave them out: Slurm applies its own limits to the project's account.
"""

from __future__ import annotations

from sqlalchemy import Select, select

from backend.jobs.spec import JobSpec
from backend.scheduling.executors import PassHosts
from backend.scheduling.placement import HostCapacity
from backend.slurm.models import SlurmJob
from backend.slurm.script import allocation_shape


class SlurmExecutor:
    counts_gpus = False

    def takes(self, spec: JobSpec) -> bool:
        return spec.slurm is not None

    def hosts_for(self, job_id: int, spec: JobSpec, hosts: PassHosts) -> list[HostCapacity] | None:
        own = hosts.bound.get(job_id, [])
        return own if len(own) >= allocation_shape(spec).nodes else None

    def uncounted_jobs(self) -> Select[tuple[int]] | None:
        return select(SlurmJob.job_id)
