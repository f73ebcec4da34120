"""Every table, imported in one place so that metadata (and Alembic) sees them all."""

from __future__ import annotations

from backend.audit.models import AuditEntry
from backend.db import Base
from backend.hosts.models import Device, Host
from backend.jobs.models import Checkpoint, Job, JobClient, JobEvent, Task
from backend.leadership.models import Leadership, ServerReplica
from backend.slurm.models import SlurmJob
from backend.streams.models import MetricPoint
from backend.sweeps.models import Sweep, SweepTrial
from backend.teams.models import Project, ProjectMember, User
from backend.tokens.models import ApiToken

__all__ = [
    "ApiToken",
    "AuditEntry",
    "Base",
    "Checkpoint",
    "Device",
    "Host",
    "Job",
    "JobClient",
    "JobEvent",
    "Leadership",
    "MetricPoint",
    "Project",
    "ProjectMember",
    "ServerReplica",
    "SlurmJob",
    "Sweep",
    "SweepTrial",
    "Task",
    "User",
]
