"""The dashboard: the built single-page app under /ui/, and / leading there.

The app routes with the URL's hash (#/jobs/7), so every page is /ui/index.html and the
static files need no server-side fallback. A server started from a checkout where the
dashboard was never built answers /ui/ with what to run instead of a bare 404.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

NOT_BUILT = """<!doctype html><title>Strata</title>
<p>The dashboard is not built. Run <code>make ui</code> (npm ci and npm run build in
<code>frontend/</code>), or point <code>STRATA_UI_DIR</code> at a built copy.</p>"""


def mount_dashboard(app: FastAPI, directory: Path) -> None:
    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    if (directory / "index.html").is_file():
        app.mount("/ui", StaticFiles(directory=directory, html=True), name="ui")
        return

    @app.get("/ui/{path:path}", include_in_schema=False)
    async def not_built(path: str) -> HTMLResponse:
        return HTMLResponse(NOT_BUILT, status_code=503)
