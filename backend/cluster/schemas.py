"""What the API returns for the cluster view: hosts with the tasks they hold."""

from __future__ import annotations

from pydantic import BaseModel

from agents.runtime_environment import EngineInfo
from backend.hosts.health import CordonCause
from backend.hosts.schemas import DeviceRead, TaskStatsRead
from backend.hosts.states import HostStatus
from backend.jobs.states import TaskStatus


class TaskRef(BaseModel):
    """A live task as seen from the host it runs on."""

    job_id: int
    job_name: str
    task: str  # "worker:1"
    status: TaskStatus
    port: int | None
    gpus: list[int]
    stats: TaskStatsRead | None = None  # its current attempt's last sample


class DeviceUsage(DeviceRead):
    task: TaskRef | None  # the task holding this device, if any


class HostUsage(BaseModel):
    name: str
    address: str
    status: HostStatus
    heartbeat_age_seconds: float
    engine: EngineInfo | None  # as in HostRead
    devices: list[DeviceUsage]
    tasks: list[TaskRef]
    cordon_reason: str | None = None  # as in HostRead: why it takes no new task
    cordon_cause: CordonCause | None = None


class ClusterTotals(BaseModel):
    hosts: int
    online_hosts: int
    gpus: int
    free_gpus: int
    live_tasks: int


class ClusterRead(BaseModel):
    hosts: list[HostUsage]
    totals: ClusterTotals
