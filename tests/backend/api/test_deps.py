"""The typed getters behind the routers' dependencies: what they return, and the error that
names what is missing when the application's lifespan has not built it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastapi.dependencies.utils
import pytest
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from backend.api import deps
from backend.app import create_app
from backend.scheduling.controller import Controller
from backend.streams.logs import LogStore
from tests.conftest import Api, make_settings
from tests.support.factories import make_spec


def connection(app: FastAPI) -> HTTPConnection:
    return HTTPConnection({"type": "http", "app": app, "headers": []})


def test_a_service_the_lifespan_has_not_built_is_named(tmp_path: Path) -> None:
    app = create_app(make_settings("sqlite://", tmp_path))
    with pytest.raises(
        RuntimeError, match=r"app.state.controller should be a Controller, found nothing"
    ):
        deps.get_controller(connection(app))
    app.state.logs = "not a log store"
    with pytest.raises(RuntimeError, match=r"app.state.logs should be a LogStore, found str"):
        deps.get_logs(connection(app))


def test_the_slurm_getter_names_the_missing_loop_before_the_lifespan(tmp_path: Path) -> None:
    app = create_app(make_settings("sqlite://", tmp_path))
    with pytest.raises(RuntimeError, match=r"app.state.slurm should be a SlurmSync, found nothing"):
        deps.get_slurm(connection(app))


async def test_the_slurm_getter_is_none_on_a_server_without_slurm(api: Api) -> None:
    assert isinstance(api.app, FastAPI)
    assert api.app.state.slurm is None
    assert deps.get_slurm(connection(api.app)) is None


async def test_each_getter_returns_what_the_lifespan_built(api: Api) -> None:
    app = api.app
    assert isinstance(app, FastAPI)
    at = connection(app)
    assert isinstance(deps.get_controller(at), Controller)
    assert isinstance(deps.get_logs(at), LogStore)
    assert deps.get_logs(at) is app.state.logs
    for getter, name in [
        (deps.get_settings, "settings"),
        (deps.get_sessions, "sessions"),
        (deps.get_ingestor, "ingestor"),
        (deps.get_broker, "broker"),
        (deps.get_runtime_links, "runtimes"),
        (deps.get_hub, "hub"),
    ]:
        assert getter(at) is getattr(app.state, name)


async def test_no_dependency_runs_in_the_thread_pool(api: Api, monkeypatch: Any) -> None:
    """FastAPI runs a plain `def` dependency in a worker thread: a round trip per dependency
    and request, which under load waits its turn for the interpreter. None of ours blocks."""
    pooled: list[str] = []

    async def noted(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        pooled.append(getattr(call, "__name__", repr(call)))
        return await run_in_threadpool(call, *args, **kwargs)

    monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", noted)
    created = await api.http.post("/jobs", json=make_spec())
    assert created.status_code == 201
    job = created.json()["id"]
    for path in (
        "/jobs",
        f"/jobs/{job}",
        f"/jobs/{job}/events",
        "/cluster",
        "/hosts",
        "/audit",
        "/tokens",
        "/me",
        "/projects",
    ):
        response = await api.http.get(path)
        assert response.status_code == 200, (path, response.text)
    assert pooled == []
