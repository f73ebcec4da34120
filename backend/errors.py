"""Domain errors and the one place where they become HTTP answers.

Services raise these; routers never build error responses by hand. Every answer has the
shape ``{"detail": "<message>"}`` and, for invalid input, ``"errors": [{"field", "message"}]``
so that a client can put each message beside the field it names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class DomainError(Exception):
    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(DomainError):
    status_code = 404


class Forbidden(DomainError):
    """The caller may see the resource but not do this to it (their role is too low)."""

    status_code = 403


class Conflict(DomainError):
    """The request is well formed but not allowed in the resource's current state."""

    status_code = 409


class PayloadTooLarge(DomainError):
    status_code = 413


class UnsupportedMediaType(DomainError):
    status_code = 415


class TaskFailed(DomainError):
    """A task the request depends on could not do its part (it answered with a failure)."""

    status_code = 502


class Unavailable(DomainError):
    """No replica can apply it just now (a leader takeover is under way): retry."""

    status_code = 503


class TaskTimeout(DomainError):
    """A task the request depends on did not answer in time."""

    status_code = 504


@dataclass(frozen=True)
class FieldIssue:
    field: str  # dotted path into the request body, e.g. "replicas.ps.count"
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidInput(DomainError):
    """Bad input, with one issue per offending field."""

    status_code = 422

    def __init__(self, issues: list[FieldIssue]) -> None:
        super().__init__("; ".join(str(issue) for issue in issues))
        self.issues = issues


class ErrorBody(BaseModel):
    """The body of every error answer but invalid input."""

    detail: str


class FieldIssueBody(BaseModel):
    field: str  # dotted path into the request (body field or parameter name); "" for the whole
    message: str


class InvalidInputBody(BaseModel):
    """The body of a 422: the issues joined in `detail`, and one entry per offending field."""

    detail: str
    errors: list[FieldIssueBody]


_ERROR_DESCRIPTIONS = {
    400: "The request cannot be taken as it is (the message names the problem).",
    401: "No bearer token, or one the server does not know.",
    403: "The token is of a kind this endpoint does not admit.",
    404: "What the path names (a job, its task, attempt or checkpoint, a host, a token) does "
    "not exist.",
    409: "The request is not allowed in the resource's current state.",
    413: "The request body is over the server's limit.",
    415: "The request body's content type is not accepted.",
    422: "Invalid input: every offending field, each with what was expected.",
    502: "A task the request waits on answered with a failure.",
    503: "No server replica leads at the moment (a takeover is under way); retry.",
    504: "A task the request waits on did not answer in time.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error codes, with the bodies the handlers below send."""
    return {
        code: {
            "model": InvalidInputBody if code == 422 else ErrorBody,
            "description": _ERROR_DESCRIPTIONS[code],
        }
        for code in codes
    }


# What every route behind an admin token can answer besides its own errors: 401 and 403 for
# the token, 422 for a query parameter it does not take (see closed_query).
ROUTER_ERRORS = error_responses(401, 403, 422)


async def closed_query(request: Request) -> None:
    """A dependency that refuses query parameters the route does not take (422 naming them),
    so that a misspelt filter (`?stauts=running`) is an error rather than silently ignored."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = _query_names(route)
    unknown = sorted({name for name in request.query_params if name not in known})
    if unknown:
        expected = f"expected one of: {', '.join(sorted(known))}" if known else "it takes none"
        raise InvalidInput(
            [FieldIssue(name, f"unknown query parameter; {expected}") for name in unknown]
        )


_QUERY_NAMES: dict[int, frozenset[str]] = {}


def _query_names(route: APIRoute) -> frozenset[str]:
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        names = _QUERY_NAMES[id(route)] = frozenset(_query_aliases(route.dependant))
    return names


def _query_aliases(dependant: Dependant) -> set[str]:
    """The query parameters of an endpoint and of every dependency it has, by wire name."""
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_aliases(sub)
    return names


def dotted(loc: tuple[int | str, ...] | list[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def error_response(exc: DomainError) -> JSONResponse:
    """The answer for a domain error: what the handlers below send, and what a middleware
    that refuses a request before it reaches them sends too."""
    body: dict[str, object] = {"detail": exc.message}
    if isinstance(exc, InvalidInput):
        body["errors"] = [{"field": i.field, "message": i.message} for i in exc.issues]
    headers = {"Retry-After": "1"} if isinstance(exc, Unavailable) else None
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain_error(_request: Request, exc: DomainError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # Query and path parameters: name the parameter, drop the "query"/"path" prefix.
        issues = [
            FieldIssue(dotted(tuple(err["loc"][1:]) or tuple(err["loc"])), err["msg"])
            for err in exc.errors()
        ]
        return await _domain_error(_request, InvalidInput(issues))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI's body parser answers a 400 "error parsing the body" for a JSON body
            # that is not UTF-8: it is invalid input like any other, and says what was wrong.
            issue = FieldIssue("", "the body is not valid UTF-8 (JSON must be UTF-8)")
            return await _domain_error(_request, InvalidInput([issue]))
        return JSONResponse(
            {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)
