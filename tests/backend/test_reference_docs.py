"""The reference pages stay true to the code.

docs/reference/settings.md lists every field of `Settings` (as its STRATA_ variable) with its
default, and nothing else, under "Server settings"; docs/reference/rest.md names every HTTP
operation of the OpenAPI document and every websocket route as `METHOD /path` (`WS /path` for
a websocket), and no operation the app does not have. When one of these fails, update the page
rather than the test: the message says what to add, change or remove.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute, WebSocketRoute

import backend.api
from backend.app import create_app
from backend.config import Settings
from tests.conftest import make_settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
SETTINGS_PAGE = REFERENCE / "settings.md"
REST_PAGE = REFERENCE / "rest.md"
LIMITS_PAGE = REFERENCE / "limits.md"

HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
# How the pages name a route: `GET /jobs/{job_id}`, `WS /stream`.
ROUTE = re.compile(r"`(GET|PUT|POST|DELETE|OPTIONS|HEAD|PATCH|TRACE|WS) (/[^`\s]*)`")
# A table row that documents a setting: | `STRATA_NAME` | default | ... |
SETTING_ROW = re.compile(r"^\|\s*`(STRATA_[A-Z0-9_]+)`\s*\|(.*)$", re.MULTILINE)
SETTING_NAME = re.compile(r"\bSTRATA_[A-Z0-9_]+\b")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    # create_app starts nothing: without its lifespan no database or data dir is touched.
    tmp = tmp_path_factory.mktemp("reference")
    return create_app(make_settings(f"sqlite:///{tmp / 'strata.db'}", tmp / "data"))


def env_name(field: str) -> str:
    return f"STRATA_{field.upper()}"


def section(text: str, heading: str) -> str:
    """The part of a markdown page under `## heading`, up to the next `## ` heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def documented_default(value: object) -> str:
    """A default as the pages write it, in backticks, the way one would set it in the
    environment: 4194304, 0.5, false, info, ~/.strata; None is written "unset"."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, Path):
        home = Path.home()
        shown = f"~/{value.relative_to(home)}" if value.is_relative_to(home) else str(value)
        return f"`{shown}`"
    return f"`{value}`"


def setting_rows(text: str) -> dict[str, str]:
    """Each documented setting and the default cell of its row."""
    rows: dict[str, str] = {}
    for name, rest in SETTING_ROW.findall(text):
        assert name not in rows, f"{name} has two rows"
        rows[name] = rest.split("|")[0].strip()
    return rows


def operations(app: FastAPI) -> set[str]:
    """Every HTTP operation of the OpenAPI document, as `METHOD /path`."""
    return {
        f"{method.upper()} {path}"
        for path, item in app.openapi()["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def websocket_paths(routes: Iterable[BaseRoute], prefix: str = "") -> set[str]:
    """The paths of every websocket route, included routers too."""
    found: set[str] = set()
    for route in routes:
        if isinstance(route, WebSocketRoute):  # FastAPI's APIWebSocketRoute is one
            found.add(prefix + route.path)
        # Recent FastAPI keeps an included router whole instead of copying its routes into
        # the app's list; its own routes carry the router's prefix already.
        included = getattr(route, "original_router", None)
        if included is not None:
            context = getattr(route, "include_context", None)
            found |= websocket_paths(included.routes, prefix + getattr(context, "prefix", ""))
    return found


def websockets(app: FastAPI) -> set[str]:
    paths = websocket_paths(app.routes)
    assert paths, "found no websocket route: adapt websocket_paths to how FastAPI lists routes"
    return {f"WS {path}" for path in paths}


def test_every_setting_is_on_the_settings_page() -> None:
    documented = setting_rows(section(SETTINGS_PAGE.read_text(), "Server settings"))
    fields = {env_name(name): field for name, field in Settings.model_fields.items()}
    missing = sorted(set(fields) - set(documented))
    assert not missing, f"add a row for each to 'Server settings' in {SETTINGS_PAGE}: {missing}"
    stale = sorted(set(documented) - set(fields))
    assert not stale, f"not settings (any more): remove them from {SETTINGS_PAGE}: {stale}"


@pytest.mark.parametrize("page", [SETTINGS_PAGE, LIMITS_PAGE], ids=lambda page: page.name)
def test_the_defaults_on_the_page_are_the_settings_defaults(page: Path) -> None:
    fields = {env_name(name): field for name, field in Settings.model_fields.items()}
    wrong = [
        f"{name}: the page says {cell!r}, the default is {documented_default(field.default)}"
        for name, cell in setting_rows(page.read_text()).items()
        if (field := fields.get(name)) is not None and documented_default(field.default) not in cell
    ]
    assert not wrong, f"defaults in {page} differ from backend/config.py:\n" + "\n".join(wrong)


def test_the_limits_page_names_only_settings_that_exist() -> None:
    fields = {env_name(name) for name in Settings.model_fields}
    unknown = sorted(set(SETTING_NAME.findall(LIMITS_PAGE.read_text())) - fields)
    assert not unknown, f"{LIMITS_PAGE} names settings that do not exist: {unknown}"


def test_every_route_and_websocket_is_on_the_rest_page(app: FastAPI) -> None:
    documented = {f"{method} {path}" for method, path in ROUTE.findall(REST_PAGE.read_text())}
    routes = operations(app) | websockets(app)
    missing = sorted(routes - documented)
    assert not missing, f"add each to {REST_PAGE}, written as `METHOD /path`: {missing}"
    stale = sorted(documented - routes)
    assert not stale, f"the app has no such route (any more): update {REST_PAGE}: {stale}"


def test_the_route_walk_finds_every_websocket_router(app: FastAPI) -> None:
    # Were websocket_paths to miss routes, the test above would pass for the wrong reason:
    # every websocket declared on a router in backend/api must be found in the app.
    declared = {
        f"WS {route.path}"
        for module in pkgutil.iter_modules(backend.api.__path__, "backend.api.")
        for router in vars(importlib.import_module(module.name)).values()
        if isinstance(router, APIRouter)
        for route in router.routes
        if isinstance(route, WebSocketRoute)
    }
    assert declared, "backend/api declares no websocket route"
    assert declared <= websockets(app)
