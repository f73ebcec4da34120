"""Domain errors and the one place where they become HTTP answers.

Services raise these; routers never build error responses by hand. Every answer has the
shape ``{"detail": "<message>"}`` and, for invalid input, ``"errors": [{"field", "message"}]``
so that a client can put each message beside the field it names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class DomainError(Exception):
    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(DomainError):
    status_code = 404


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


def dotted(loc: tuple[int | str, ...] | list[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain_error(_request: Request, exc: DomainError) -> JSONResponse:
        body: dict[str, object] = {"detail": exc.message}
        if isinstance(exc, InvalidInput):
            body["errors"] = [{"field": i.field, "message": i.message} for i in exc.issues]
        return JSONResponse(body, status_code=exc.status_code)

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
        return JSONResponse(
            {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)
