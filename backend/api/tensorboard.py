"""TensorBoard for a job, or for several jobs compared, behind Strata's authentication.

`/jobs/{id}/tensorboard/` serves the job's event files (the runtime writes them under
``<checkpoint dir>/tensorboard/<task>``); `/tensorboard/compare?jobs=3,5` redirects to
`/tensorboard/compare/3-5/`, one TensorBoard with a run per job and task (``job3/chief-0``).
The board starts on the first request (backend.tensorboard.processes).

A browser cannot put a bearer header on a page's own requests, so a page opened with
``?token=`` (as the dashboard's link does) is redirected to the same address without it,
with the token in an HttpOnly, SameSite=Strict cookie scoped to that board's path; the
board's later requests carry the cookie. API clients send the usual Authorization header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.api.deps import JobId, app_state, identify, job_scope
from backend.auth import Principal, TokenKind
from backend.config import Settings
from backend.errors import DomainError, FieldIssue, InvalidInput, NotFound
from backend.jobs.models import Job
from backend.jobs.spec import stored_spec
from backend.scheduling.launch import checkpoint_dir
from backend.teams.access import ProjectRole
from backend.tensorboard.processes import BoardSpec, TensorBoards
from backend.tensorboard.proxy import TOKEN_PARAMETER, forward

router = APIRouter(tags=["tensorboard"])

COOKIE = "strata_tensorboard"
EVENTS_SUBDIR = "tensorboard"  # under a job's checkpoint dir (agents.runtime.event_files)
MAX_COMPARED = 8
READERS = (TokenKind.admin, TokenKind.viewer, TokenKind.user)
METHODS = ["GET", "POST"]  # TensorBoard's pages read with both


class Unauthorized(DomainError):
    status_code = 401


class Forbidden(DomainError):
    status_code = 403


async def _principal(request: Request) -> tuple[Principal, str | None]:
    """The caller, and the token when it came as ?token= (to be moved into the cookie)."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    from_query = request.query_params.get(TOKEN_PARAMETER)
    if scheme.lower() == "bearer" and credentials:
        token, moved = credentials, None
    elif from_query:
        token, moved = from_query, from_query
    elif request.cookies.get(COOKIE):
        token, moved = request.cookies[COOKIE], None
    else:
        raise Unauthorized(
            "missing token: send 'Authorization: Bearer <token>', or open the page with "
            "?token=<token> (the dashboard's TensorBoard link does)"
        )
    principal = await identify(request.app, token)
    if principal is None:
        raise Unauthorized("invalid token")
    if principal.kind not in READERS:
        raise Forbidden(
            "TensorBoard needs an admin, viewer or user token; "
            f"a {principal.kind.value} token was given"
        )
    return principal, moved


async def _logdir(
    sessions: async_sessionmaker[AsyncSession], root: Path, job_id: int, principal: Principal
) -> Path:
    """The job's event files, for a caller who may read the job (else it does not exist)."""
    async with sessions() as session:
        await job_scope(
            session=session, principal=principal, job_id=job_id, needed=ProjectRole.viewer
        )
        spec = (
            await session.execute(select(Job.spec).where(Job.id == job_id))
        ).scalar_one_or_none()
    if spec is None:
        raise NotFound(f"job {job_id} does not exist")
    return checkpoint_dir(stored_spec(spec), job_id, root) / EVENTS_SUBDIR


async def _serve(request: Request, spec_for: BoardSpec, path: str, moved: str | None) -> Response:
    if moved is not None and request.method == "GET":
        # The page's address without the token; the cookie carries it from now on.
        query = urlencode(
            [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_PARAMETER]
        )
        redirect = RedirectResponse(request.url.path + (f"?{query}" if query else ""), 303)
        redirect.set_cookie(
            COOKIE,
            moved,
            path=spec_for.prefix + "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return redirect
    boards = app_state(request, "tensorboards", TensorBoards)
    board = await boards.open(spec_for)
    return await forward(request, board, boards.client, path)


def _job_board(job_id: int, logdir: Path) -> BoardSpec:
    return BoardSpec(
        key=f"job-{job_id}", prefix=f"/jobs/{job_id}/tensorboard", runs=(("", logdir),)
    )


@router.get("/jobs/{job_id}/tensorboard", include_in_schema=False)
async def job_tensorboard_root(job_id: JobId, request: Request) -> Response:
    await _principal(request)
    return RedirectResponse(f"/jobs/{job_id}/tensorboard/?{request.url.query}".rstrip("?"), 307)


@router.api_route(
    "/jobs/{job_id}/tensorboard/{path:path}", methods=METHODS, include_in_schema=False
)
async def job_tensorboard(job_id: JobId, path: str, request: Request) -> Response:
    """The job's TensorBoard (started on first use), proxied."""
    principal, moved = await _principal(request)  # first: no 404 tells an outsider what exists
    settings = app_state(request, "settings", Settings)
    sessions = request.app.state.sessions
    logdir = await _logdir(sessions, settings.checkpoints, job_id, principal)
    return await _serve(request, _job_board(job_id, logdir), path, moved)


def _compared_ids(text: str, separator: str, field: str) -> list[int]:
    try:
        ids = sorted({int(part) for part in text.split(separator) if part.strip()})
    except ValueError:
        ids = []
    if not 2 <= len(ids) <= MAX_COMPARED or ids[0] < 1:
        raise InvalidInput(
            [FieldIssue(field, f"2 to {MAX_COMPARED} distinct job ids, e.g. 3{separator}5")]
        )
    return ids


@router.get("/tensorboard/compare", include_in_schema=False)
async def compare_tensorboard_root(
    request: Request, jobs: Annotated[str, Query(description="Job ids, e.g. 3,5.")] = ""
) -> Response:
    """Redirects to the TensorBoard comparing these jobs (`/tensorboard/compare/3-5/`)."""
    await _principal(request)
    ids = _compared_ids(jobs, ",", "jobs")
    token = request.query_params.get(TOKEN_PARAMETER)
    suffix = f"?{TOKEN_PARAMETER}={token}" if token else ""
    return RedirectResponse(f"/tensorboard/compare/{'-'.join(map(str, ids))}/{suffix}", 307)


@router.api_route(
    "/tensorboard/compare/{jobs}/{path:path}", methods=METHODS, include_in_schema=False
)
async def compare_tensorboard(jobs: str, path: str, request: Request) -> Response:
    """One TensorBoard over several jobs' event files, a run per job and task, proxied."""
    principal, moved = await _principal(request)
    ids = _compared_ids(jobs, "-", "jobs")
    canonical = "-".join(map(str, ids))
    if jobs != canonical:
        raise NotFound(f"compare {canonical}, not {jobs}")
    settings = app_state(request, "settings", Settings)
    sessions = request.app.state.sessions
    runs = tuple(
        [(f"job{i}", await _logdir(sessions, settings.checkpoints, i, principal)) for i in ids]
    )
    spec = BoardSpec(
        key=f"compare-{canonical}", prefix=f"/tensorboard/compare/{canonical}", runs=runs
    )
    return await _serve(request, spec, path, moved)
