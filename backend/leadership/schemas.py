"""What `GET /replicas` answers: who leads, and every replica with its last renewal."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class ReplicaRead(BaseModel):
    replica: str
    url: str = Field(description="Where the other replicas forward to it while it leads.")
    role: Literal["leader", "follower"]
    started_at: datetime
    renewed_at: datetime = Field(
        description="Its last attempt to take or renew the lease (every third of the lease "
        "time, leader or not): a replica long past that is gone."
    )


class ReplicasRead(BaseModel):
    leader: str | None = Field(description="The replica whose lease is unexpired; null: none.")
    epoch: int | None = Field(description="The leader's epoch; null on SQLite or with none.")
    lease_expires_at: datetime | None
    replicas: list[ReplicaRead]
