"""What the client coordinator's routes take and answer."""

from __future__ import annotations

from pydantic import BaseModel, Field

from backend.jobs.schemas import ClientRead


class AttachRequest(BaseModel):
    host: str = Field(min_length=1, max_length=255, description="Where the client runs.")
    pid: int = Field(ge=1, le=2**31 - 1, description="The client's process id there.")
    take_over: bool = Field(
        default=False, description="Detach the client attached now, if any, and take its place."
    )


class Attachment(BaseModel):
    """What a client needs to coordinate the job: the cluster it drives, and the environment
    the runtime reads in a chief (its token, checkpoint dir and policy, options)."""

    client: ClientRead
    task: str = Field(description="The task it is to the runtime channel: chief:0.")
    cluster: dict[str, list[str]] = Field(description="worker and ps addresses, host:port.")
    env: dict[str, str] = Field(description="Strata's variables, as a chief would have them.")
    heartbeat_seconds: float = Field(description="How often to say it is alive.")
    lost_seconds: float = Field(description="Silent this long, it is detached as gone.")
