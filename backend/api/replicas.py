"""`GET /replicas`: which server replica leads, and each replica's last renewal. Answered by
every replica from the database (never forwarded), so it shows a takeover as it happens."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from backend.api.deps import SessionDep, SignedInPrincipal
from backend.errors import ROUTER_ERRORS, closed_query
from backend.leadership import statements
from backend.leadership.schemas import ReplicaRead, ReplicasRead

router = APIRouter(tags=["cluster"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)])


@router.get("/replicas", response_model=ReplicasRead)
async def list_replicas(
    session: SessionDep, request: Request, _: SignedInPrincipal
) -> ReplicasRead:
    """The leader and every replica on this database. On SQLite: this one server, leading."""
    lease = request.app.state.lease
    if request.app.state.engine.dialect.name == "sqlite":
        settings = request.app.state.settings
        started = request.app.state.started_at
        return ReplicasRead(
            leader=lease.replica,
            epoch=None,
            lease_expires_at=None,
            replicas=[
                ReplicaRead(
                    replica=lease.replica,
                    url=settings.replica_url,
                    role="leader",
                    started_at=started,
                    renewed_at=started,
                )
            ],
        )
    row, unexpired, listed = await statements.replicas(session)
    leader = row.holder if row is not None and unexpired else None
    return ReplicasRead(
        leader=leader,
        epoch=row.epoch if row is not None and unexpired else None,
        lease_expires_at=row.expires_at if row is not None else None,
        replicas=[
            ReplicaRead(
                replica=r.replica,
                url=r.url,
                role="leader" if r.replica == leader else "follower",
                started_at=r.started_at,
                renewed_at=r.renewed_at,
            )
            for r in listed
        ],
    )
