"""What the API returns for hosts and the cluster view."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from agents.runtime_environment import EngineInfo
from backend.jobs.states import HostStatus, TaskStatus


class DeviceRead(BaseModel):
    index: int
    kind: str
    name: str
    uuid: str | None
    memory_mb: int | None
    simulated: bool


class HostRead(BaseModel):
    name: str
    address: str
    status: HostStatus
    port_range: tuple[int, int]
    agent_version: str | None
    engine: EngineInfo | None = Field(
        description="The container engine its agent can start tasks in (environment.image); "
        "null: it has none, and runs no job that names an image."
    )
    devices: list[DeviceRead]
    registered_at: datetime
    last_heartbeat_at: datetime
    heartbeat_age_seconds: float


class TaskRef(BaseModel):
    """A live task as seen from the host it runs on."""

    job_id: int
    job_name: str
    task: str  # "worker:1"
    status: TaskStatus
    port: int | None
    gpus: list[int]


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


class ClusterTotals(BaseModel):
    hosts: int
    online_hosts: int
    gpus: int
    free_gpus: int
    live_tasks: int


class ClusterRead(BaseModel):
    hosts: list[HostUsage]
    totals: ClusterTotals
