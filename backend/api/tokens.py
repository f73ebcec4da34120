"""Tokens: create (the secret is shown once), list, revoke (admin only); and which token is
this (admin or viewer)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, status

from agents.protocol import MAX_INT32
from backend.api.audit import ClientSource
from backend.api.deps import ActorPrincipal, AdminPrincipal, SessionDep, SignedInPrincipal
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.auth import Principal, TokenKind
from backend.errors import ROUTER_ERRORS, NotFound, closed_query, error_responses
from backend.tokens import service
from backend.tokens.schemas import TokenCreate, TokenCreated, TokenRead, TokenSelf

router = APIRouter(
    prefix="/tokens", tags=["tokens"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)]
)

TokenId = Annotated[int, Path(ge=1, le=MAX_INT32, description="The token's id.")]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
async def create_token(
    body: TokenCreate, session: SessionDep, principal: AdminPrincipal, source: ClientSource
) -> TokenCreated:
    """A new token; its secret is in this answer only (the server keeps a hash)."""
    created = await service.create_token(
        session=session, name=body.name, kind=body.kind, expires_in_seconds=body.expires_in_seconds
    )
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.token_create,
        target=f"token {created.id}",
        detail={"name": created.name, "kind": created.kind},
    )
    await session.commit()
    return created


@router.get("", response_model=list[TokenRead])
async def list_tokens(session: SessionDep, principal: ActorPrincipal) -> list[TokenRead]:
    """Every stored token (a user: their own), revoked and expired ones too; never a secret."""
    rows = await service.list_tokens(session=session, user_id=_own_only(principal))
    return [service.token_read(token, user=user) for token, user in rows]


def _own_only(principal: Principal) -> int | None:
    """Whose tokens the caller may list and revoke: a user's own; None: any (admin tokens)."""
    if principal.kind is TokenKind.user:
        assert principal.user_id is not None
        return principal.user_id
    return None


@router.get("/self", response_model=TokenSelf)
async def token_self(principal: SignedInPrincipal) -> TokenSelf:
    """Which kind of token made this request: what a client (the dashboard) may offer."""
    return TokenSelf(kind=principal.kind.value, token_id=principal.token_id)


@router.delete("/{token_id}", response_model=TokenRead, responses=error_responses(404))
async def revoke_token(
    token_id: TokenId, session: SessionDep, principal: ActorPrincipal, source: ClientSource
) -> TokenRead:
    """Revoke a token (a user: one of their own): refused from the next request on (revoking
    twice changes nothing)."""
    owner = _own_only(principal)
    if (
        owner is not None
        and (await service.get_token(session=session, token_id=token_id)).user_id != owner
    ):
        raise NotFound(f"token {token_id} does not exist")  # another's is not named as existing
    token = await service.revoke_token(session=session, token_id=token_id)
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.token_revoke,
        target=f"token {token.id}",
        detail={"name": token.name},
    )
    await session.commit()
    return service.token_read(token)
