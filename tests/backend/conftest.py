"""Fixtures shared by the backend tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.app import create_app
from backend.db import create_engine
from backend.migrate import upgrade_database
from tests.conftest import make_settings


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    """The app in a TestClient, lifespan running, on both databases."""
    with TestClient(create_app(make_settings(database_url, tmp_path / "data"))) as test_client:
        yield test_client


@pytest.fixture
async def engine(database_url: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """An engine on a migrated database, on both databases (no app around it)."""
    engine = create_engine(make_settings(database_url, tmp_path / "data").resolved_database_url)
    await upgrade_database(engine)
    yield engine
    await engine.dispose()


def count_updates(engine: AsyncEngine, table: str) -> Counter[str]:
    """From now on, how many UPDATE statements of `table` the engine runs (under `table`)."""
    updates: Counter[str] = Counter()

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith(f"UPDATE {table}"):
            updates[table] += 1

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    return updates
