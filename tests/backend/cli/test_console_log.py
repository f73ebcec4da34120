"""What the server's console shows: no line per request or websocket unless STRATA_ACCESS_LOG,
and a line for each job's submission and status change once it has been committed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.cli.server_logging import WebsocketConnectionLines, server_log_config
from backend.config import Settings, async_database_url
from backend.db import PublishingSession, create_engine, session_factory
from backend.jobs.models import Job
from backend.jobs.spec import validate_spec
from backend.jobs.states import JobStatus
from backend.migrate import upgrade_database
from backend.scheduling.lifecycle import transition_job
from backend.streams.broker import Broker
from backend.streams.publishing import BROKER
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.factories import create_job, make_spec
from tests.support.processes import strata_server

TOKENS = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, msg, args, None)


def test_websocket_connection_lines_are_dropped_and_nothing_else() -> None:
    quiet = WebsocketConnectionLines()
    for line in (
        record('%s - "WebSocket %s" [accepted]', "127.0.0.1:5", "/agents/connect"),
        record('%s - "WebSocket %s" %d', "127.0.0.1:5", "/nowhere", 404),
        record("connection open"),
        record("connection closed"),
    ):
        assert not quiet.filter(line), line.getMessage()
    for line in (
        record("connection rejected (%d %s)", 400, "Bad Request"),
        record("Application startup complete."),
        record("Uvicorn running on %s", "http://127.0.0.1:8000"),
    ):
        assert quiet.filter(line), line.getMessage()


def test_the_filter_is_installed_only_without_the_access_log() -> None:
    quiet = server_log_config("info")["loggers"]["uvicorn.error"]
    assert quiet["filters"] == ["websocket_connections"]
    assert "filters" not in server_log_config("info", access_log=True)["loggers"]["uvicorn.error"]


def test_the_access_log_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_ACCESS_LOG", raising=False)
    assert Settings().access_log is False
    monkeypatch.setenv("STRATA_ACCESS_LOG", "1")
    assert Settings().access_log is True


def served_log(tmp_path: Path, env: dict[str, str]) -> str:
    """The console of a real `strata server` that answered a few requests, once it stopped."""
    with strata_server(tmp_path / "data", {**TOKENS, **env}) as url:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        for _ in range(3):
            assert httpx.get(f"{url}/hosts", headers=headers).status_code == 200
        port = urlsplit(url).port
    return (tmp_path / f"server-{port}.log").read_text()


@pytest.mark.slow  # the server in a subprocess
def test_a_server_logs_no_request_by_default(tmp_path: Path) -> None:
    console = served_log(tmp_path, {})
    assert "Application startup complete" in console
    assert "GET /hosts" not in console


@pytest.mark.slow  # the server in a subprocess
def test_a_server_logs_every_request_when_asked(tmp_path: Path) -> None:
    console = served_log(tmp_path, {"STRATA_ACCESS_LOG": "1"})
    assert console.count('"GET /hosts HTTP/1.1" 200') == 3


def job_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "backend.jobs"]


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions like the server's (they publish job events on commit), with no controller
    beside them to change the same jobs."""
    engine = create_engine(async_database_url(database_url))
    await upgrade_database(engine)
    yield session_factory(engine, sync_session_class=PublishingSession, info={BROKER: Broker()})
    await engine.dispose()


async def test_job_changes_are_logged_once_committed(
    sessions: async_sessionmaker[AsyncSession], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="backend.jobs")
    async with sessions() as session:
        job = await create_job(session=session, spec=validate_spec(make_spec()))
        await session.commit()
    job_id = job.id
    assert job_lines(caplog) == [f"job {job_id} submitted with 4 tasks"]

    caplog.clear()
    reason = "cancelled by the test\nwith a second line the log leaves out"
    async with sessions() as session:
        job = await session.get_one(Job, job_id)
        await transition_job(session=session, job=job, to=JobStatus.cancelled, reason=reason)
        await session.rollback()
    assert job_lines(caplog) == []  # rolled back: it never happened

    async with sessions() as session:
        job = await session.get_one(Job, job_id)
        await transition_job(session=session, job=job, to=JobStatus.cancelled, reason=reason)
        await session.commit()
    assert job_lines(caplog) == [f"job {job_id} pending → cancelled: cancelled by the test"]
