"""Fixtures shared by every test: databases (SQLite and PostgreSQL), the app, and clients."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pluggy import Result
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncSession

from backend import session_hooks
from backend.app import create_app
from backend.config import Settings, async_database_url
from backend.db import create_engine
from backend.migrate import upgrade_database
from tests.support.file_scheduling import DOCKER_SCOPE, E2E_DIR, file_of, scope_of
from tests.support.postgres import create_database, drop_database, find_bindir, running_postgres
from tests.support.strict import STRICT, missing_dependency

ADMIN_TOKEN = "admin-token-for-tests"
AGENT_TOKEN = "agent-token-for-tests"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    """Under STRATA_TEST_STRICT=1 a skip of any kind is a failure: CI must run everything."""
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under STRATA_TEST_STRICT=1: {report.longrepr}"


def _weight(item: pytest.Item) -> int:
    """How early an item's file is handed out: the longest kinds first, so that no worker
    starts a long file when the others are nearly done."""
    if scope_of(item.nodeid) == DOCKER_SCOPE:
        return 0
    for rank, marker in enumerate(("e2e", "slow", "postgres"), start=1):
        if item.get_closest_marker(marker) is not None:
            return rank
    return 4


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `--dist loadfile` (make test) each file runs whole on one worker; one worker
    runs end-to-end files while light files are queued, then up to STRATA_TEST_HEAVY_LANES
    (default 2)."""
    if config.getvalue("dist") != "loadfile":
        return None
    import os

    from tests.support.file_scheduling import FileScheduling

    lanes = int(os.environ.get("STRATA_TEST_HEAVY_LANES", "2"))
    return FileScheduling(config, log, heavy_lanes=lanes, lanes_beside_light=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heavy files first, so that no worker starts a long file when the others are nearly done.
    The order is the same in every worker, as xdist requires. The end-to-end tests are the
    files under tests/e2e/, and only those: the scheduler knows them by their path."""
    by_file: dict[str, int] = {}
    for item in items:
        in_e2e_dir = file_of(item.nodeid).startswith(E2E_DIR)
        if in_e2e_dir != (item.get_closest_marker("e2e") is not None):
            raise pytest.UsageError(f"{item.nodeid}: e2e tests are those in {E2E_DIR}, marked e2e")
        file = file_of(item.nodeid)
        by_file[file] = min(by_file.get(file, 4), _weight(item))
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (by_file[file_of(item.nodeid)], order[id(item)]))


@pytest.fixture(scope="session", autouse=True)
def agent_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Agents started without --state-dir keep their identity under this session's temp dir
    (agents.host.identity.default_state_dir), not in the home dir, where agents of the same
    name in another test run would find their state dir locked."""
    import os

    previous = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("agent-state"))
    yield
    if previous is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = previous


@pytest.fixture(scope="session", autouse=True)
def no_warm_pools() -> Iterator[None]:
    """Agents the tests start keep no warm processes unless a test asks for them
    (tests/e2e/test_warm_starts.py): on two cores, a pool's TensorFlow imports at every
    cluster start would compete with the test's own training."""
    import os

    previous = os.environ.setdefault("STRATA_AGENT_WARM_POOL", "0")
    yield
    if previous == "0":
        os.environ.pop("STRATA_AGENT_WARM_POOL", None)


@pytest.fixture(scope="session", autouse=True)
def sqlalchemy_hooks() -> None:
    """The session and mapper hooks, installed as every process that opens sessions installs
    them: many tests open sessions on engines of their own, without the app around them."""
    session_hooks.install()


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A PostgreSQL server for this test session: an existing one by URL, or a fresh one."""
    import os

    existing = os.environ.get("STRATA_TEST_POSTGRES_URL")
    if existing:
        yield existing
        return
    bindir = find_bindir()
    if bindir is None:
        missing_dependency("no PostgreSQL server binaries (apt-get install postgresql)")
    with running_postgres(bindir) as url:
        yield url


async def _migrated(url: str) -> None:
    engine = create_engine(async_database_url(url))
    try:
        await upgrade_database(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
async def migrated_postgres(postgres_admin_url: str) -> str:
    """A database with every migration applied, made once per session: each test's database
    is a copy of it, as migrating an empty one costs more than most tests take."""
    url = await create_database(postgres_admin_url, prefix="strata_template")
    await _migrated(url)
    return url.rsplit("/", 1)[1]


@pytest.fixture(scope="session")
async def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As migrated_postgres, for SQLite: a file each test copies."""
    path = tmp_path_factory.mktemp("migrated") / "strata.db"
    await _migrated(f"sqlite:///{path}")
    return path


@pytest.fixture
async def postgres_url(postgres_admin_url: str, migrated_postgres: str) -> AsyncIterator[str]:
    """A database of its own on the test server, migrated, dropped afterwards."""
    url = await create_database(postgres_admin_url, template=migrated_postgres)
    yield url
    await drop_database(postgres_admin_url, url)


@pytest.fixture
async def empty_postgres_url(postgres_admin_url: str) -> AsyncIterator[str]:
    """A fresh, empty database on the test server (no migration applied), dropped afterwards."""
    url = await create_database(postgres_admin_url)
    yield url
    await drop_database(postgres_admin_url, url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every test that takes this runs once on SQLite and once on PostgreSQL, on a database of
    its own with every migration applied (the server's upgrade at start finds nothing to do)."""
    if request.param == "sqlite":
        path = tmp_path / "strata.db"
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """As database_url, but empty: for the tests of the migrations themselves."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'strata.db'}"
    url: str = request.getfixturevalue("empty_postgres_url")
    return url


def make_settings(database_url: str, data_dir: Path, **overrides: object) -> Settings:
    return Settings(
        database_url=database_url,
        data_dir=data_dir,
        api_token=SecretStr(ADMIN_TOKEN),
        agent_token=SecretStr(AGENT_TOKEN),
        **overrides,  # type: ignore[arg-type]
    )


@dataclass
class Api:
    """An HTTP client on the app, plus a way to reach its database directly."""

    http: httpx.AsyncClient
    app: object

    def session(self) -> AsyncSession:
        return self.app.state.sessions()  # type: ignore[attr-defined, no-any-return]


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Api]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://strata.test",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        ) as http:
            yield Api(http=http, app=app)


@pytest.fixture
async def api(database_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    async with serving(make_settings(database_url, tmp_path / "data")) as served:
        yield served


@pytest.fixture
async def quiet_api(database_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    """As `api`, but its controller passes only when a request wakes it, never on its own
    period: for tests that arrange jobs directly in the database, where a pass meanwhile
    writes them too (a pending job's reason) and one of the two writes fails as stale."""
    settings = make_settings(database_url, tmp_path / "data", reconcile_seconds=3600.0)
    async with serving(settings) as served:
        yield served
