"""What the API returns for hosts and their devices."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from agents.protocol import HealthFault
from agents.runtime_environment import EngineInfo
from backend.hosts.health import CordonCause
from backend.hosts.states import HostStatus


class DeviceStatsRead(BaseModel):
    """A GPU's utilisation and memory when its agent last sampled them (NVML)."""

    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    sampled_at: datetime


class TaskStatsRead(BaseModel):
    """What a task attempt's processes used together when its agent last sampled them."""

    attempt: int
    cpu_percent: float | None = Field(
        description="Of one core (200: two busy cores), over the agent's last few seconds."
    )
    cpu_seconds: float | None = Field(description="User and system CPU time so far.")
    rss_bytes: int | None = Field(description="Resident memory, page cache left out.")
    sampled_at: datetime


class DeviceRead(BaseModel):
    index: int
    kind: str
    name: str
    uuid: str | None
    memory_mb: int | None
    simulated: bool
    stats: DeviceStatsRead | None = Field(
        default=None,
        description="Its last sample; null for simulated devices and until its agent reports.",
    )


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
    draining_since: datetime | None = Field(
        default=None,
        description="Since when it is drained (POST /hosts/{name}/drain): it takes no new "
        "task, and what ran there is moved off; null: it is in service.",
    )
    live_tasks: int = Field(
        default=0, description="Task attempts placed on it that have not ended (what is left)."
    )
    cordon_reason: str | None = Field(
        default=None,
        description="Why it is cordoned (it takes no new task; what runs there goes on) until "
        "an operator clears it (POST /hosts/{name}/uncordon); null: it is not.",
    )
    cordoned_at: datetime | None = None
    cordon_cause: CordonCause | None = Field(
        default=None,
        description="manual: an operator; fault: a fault its agent reported (or its clock); "
        "failures: its tasks' infrastructure failures.",
    )
    faults: list[HealthFault] = Field(
        default_factory=list,
        description="What its agent's last health report found wrong (each cordons it).",
    )
    warnings: list[HealthFault] = Field(
        default_factory=list, description="What that report found worth saying (no cordon)."
    )
    faults_since: datetime | None = Field(
        default=None, description="Since when its faults and warnings are as they are."
    )
