"""Code bundles: upload (whoever may submit), fetch (agents) by SHA-256, and what one holds.

A bundle belongs to no project: it is named by its SHA-256, so only who knows the digest can
ask for it, and anyone who may submit a job (an admin token, any user) may upload, check and
read bundles, as they may submit a job that runs in one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request, Response, status
from fastapi.responses import FileResponse
from starlette.requests import HTTPConnection

from backend.api.body import declared_length
from backend.api.deps import (
    ActorPrincipal,
    SessionDep,
    SignedInPrincipal,
    app_state,
    on_the_loop,
    require,
)
from backend.auth import Principal, TokenKind
from backend.code.schemas import LIMIT_HEADER, CodeBundleRead, CodeManifest
from backend.code.store import CodeStore
from backend.errors import ROUTER_ERRORS, NotFound, closed_query, error_responses
from backend.jobs.models import Job

router = APIRouter(
    prefix="/code", tags=["code"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)]
)

Digest = Annotated[str, Path(description="The bundle's SHA-256: 64 lowercase hex characters.")]
FetcherPrincipal = Annotated[
    Principal, Depends(require(TokenKind.admin, TokenKind.agent, TokenKind.user))
]
# The agents of a Slurm allocation hold their job's token: they fetch that job's bundle only.
BundleFetcher = Annotated[
    Principal,
    Depends(require(TokenKind.admin, TokenKind.agent, TokenKind.job_agent, TokenKind.user)),
]


def get_code_store(connection: HTTPConnection) -> CodeStore:
    return app_state(connection, "code", CodeStore)


CodeStoreDep = Annotated[CodeStore, Depends(on_the_loop(get_code_store))]


@router.put(
    "/{sha256}",
    response_model=CodeBundleRead,
    status_code=201,
    responses=error_responses(400, 413) | {200: {"description": "The bundle was already stored."}},
)
async def put_code(
    sha256: Digest, request: Request, response: Response, store: CodeStoreDep, _: ActorPrincipal
) -> CodeBundleRead:
    """Store a code bundle (a tar) under its SHA-256; idempotent (200 when already stored)."""
    store.path(sha256)  # a bad digest is refused before any byte is read
    stored = await store.receive(sha256, request.stream(), declared_length(request.headers))
    if not stored.created:
        response.status_code = 200
    return CodeBundleRead(sha256=stored.sha256, size=stored.size)


@router.head(
    "/{sha256}",
    responses=error_responses(400)
    | {
        200: {"description": "The bundle is stored; Content-Length is its size."},
        404: {"description": "No such bundle."},
    },
)
async def head_code(sha256: Digest, store: CodeStoreDep, _: FetcherPrincipal) -> Response:
    """Whether a bundle is stored; both answers carry the upload limit in
    Strata-Max-Code-Bytes."""
    size = store.size(sha256)
    headers = {LIMIT_HEADER: str(store.max_bytes)}
    if size is None:
        return Response(status_code=404, headers=headers)
    return Response(status_code=200, headers=headers | {"Content-Length": str(size)})


@router.get(
    "/{sha256}",
    response_class=FileResponse,
    responses=error_responses(400, 403, 404) | {200: {"content": {"application/x-tar": {}}}},
)
async def get_code(
    sha256: Digest, store: CodeStoreDep, session: SessionDep, caller: BundleFetcher
) -> FileResponse:
    """The bundle's bytes (a tar), for agents; a job's own agents (Slurm) get its bundle only."""
    if caller.kind is TokenKind.job_agent:
        job = await session.get(Job, caller.job_id) if caller.job_id is not None else None
        code = job.job_spec.code if job is not None else None
        if code is None or code.sha256 != sha256:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"a job agent token fetches only its own job's code bundle, not {sha256}",
            )
    if store.size(sha256) is None:
        raise NotFound(f"no code bundle {sha256}")
    return FileResponse(store.path(sha256), media_type="application/x-tar")


@router.get("/{sha256}/manifest", response_model=CodeManifest, responses=error_responses(400, 404))
async def get_code_manifest(
    sha256: Digest, store: CodeStoreDep, _: SignedInPrincipal
) -> CodeManifest:
    """What a stored bundle holds: its size, and its members (path, size, kind) in archive
    order, the first 10,000 listed and the rest counted. Admin, viewer and user tokens may
    see it; the bytes are for agents and whoever may submit."""
    return await store.manifest(sha256)
