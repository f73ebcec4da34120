"""Liveness: the one endpoint that needs no token."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from backend.api.deps import SessionDep
from backend.db import ping

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    database: str
    role: Literal["leader", "follower"] = Field(
        description="Whether this replica leads: runs the controller's passes."
    )
    replica: str = Field(description="This server replica's id, kept in its data dir.")
    epoch: int | None = Field(
        description="The epoch of the lease it holds while leading on PostgreSQL; null on "
        "SQLite, whose one server always leads, and on a follower."
    )


@router.get("/healthz", response_model=Health)
async def healthz(session: SessionDep, request: Request) -> Health:
    """Whether the server is up and its database answers, and whether it leads."""
    database = await ping(session=session)
    lease = request.app.state.lease
    return Health(
        status="ok",
        database=database,
        role="leader" if lease.is_leader else "follower",
        replica=lease.replica,
        epoch=lease.epoch,
    )
