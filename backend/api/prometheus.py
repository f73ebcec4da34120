"""The server's own metrics in Prometheus's text format, for operators (not a job's metrics:
those are GET /jobs/{id}/metrics)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import HTTPConnection

from backend.api.deps import ReaderPrincipal, SessionDep, app_state, on_the_loop
from backend.errors import closed_query, error_responses
from backend.monitoring.scrape import Scraper

router = APIRouter(
    tags=["monitoring"],
    responses=error_responses(401, 403),
    dependencies=[Depends(closed_query)],
)


def get_scraper(connection: HTTPConnection) -> Scraper:
    return app_state(connection, "scraper", Scraper)


ScraperDep = Annotated[Scraper, Depends(on_the_loop(get_scraper))]


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Jobs, tasks, hosts and GPUs counted now; the controller's pass and "
            "placement times, restarts, ingested points, streams and websocket refusals.",
            "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
        }
    },
)
async def prometheus_metrics(
    session: SessionDep,
    _: ReaderPrincipal,
    scraper: ScraperDep,
) -> Response:
    """The server's metrics in the Prometheus text format (an admin or viewer token)."""
    return Response(await scraper.scrape(session=session), media_type=CONTENT_TYPE_LATEST)
