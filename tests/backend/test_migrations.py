"""Migrations and models agree, on both databases, and downgrade cleanly."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from backend.config import async_database_url
from backend.db import create_engine
from backend.models import Base
from backend.schema import downgrade_database, upgrade_database


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names()) - {"alembic_version"}


async def test_upgrade_matches_models_and_downgrade_removes_everything(database_url: str) -> None:
    engine = create_engine(async_database_url(database_url))
    try:
        await upgrade_database(engine)
        async with engine.connect() as connection:
            assert await connection.run_sync(_diff) == []
            assert await connection.run_sync(_tables) == set(Base.metadata.tables)

        await downgrade_database(engine, "base")
        async with engine.connect() as connection:
            assert await connection.run_sync(_tables) == set()

        await upgrade_database(engine)  # and back up again, from nothing
        async with engine.connect() as connection:
            assert await connection.run_sync(_diff) == []
    finally:
        await engine.dispose()


async def test_upgrade_is_idempotent(database_url: str) -> None:
    engine = create_engine(async_database_url(database_url))
    try:
        await upgrade_database(engine)
        await upgrade_database(engine)
        async with engine.connect() as connection:
            assert await connection.run_sync(_diff) == []
    finally:
        await engine.dispose()
