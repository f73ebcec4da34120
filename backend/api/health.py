"""Liveness: the one endpoint that needs no token."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from backend.api.deps import SessionDep
from backend.db import ping

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    database: str


@router.get("/healthz", response_model=Health)
async def healthz(session: SessionDep) -> Health:
    """Whether the server is up and its database answers."""
    return Health(status="ok", database=await ping(session=session))
