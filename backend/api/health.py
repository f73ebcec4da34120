"""Liveness: the one endpoint that needs no token."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import text

from backend.api.deps import SessionDep

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    database: str


@router.get("/healthz", response_model=Health)
async def healthz(session: SessionDep) -> Health:
    """Whether the server is up and its database answers."""
    await session.execute(text("SELECT 1"))
    return Health(status="ok", database=session.get_bind().dialect.name)
