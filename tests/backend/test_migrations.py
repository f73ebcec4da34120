"""Migrations and models agree, on both databases, and downgrade cleanly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.config import async_database_url
from backend.db import create_engine
from backend.migrate import alembic_config, upgrade_database
from backend.models import Base


@pytest.fixture
def database_url(empty_database_url: str) -> str:
    """The migrations' own tests start from an empty database, not the migrated copy."""
    return empty_database_url


def _downgrade(connection: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.downgrade(config, revision)


async def downgrade_database(engine: AsyncEngine, revision: str) -> None:
    """Down to `revision`: only these tests go down; the server only upgrades."""
    async with engine.begin() as connection:
        await connection.run_sync(_downgrade, revision)


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


@pytest.mark.postgres
async def test_replicas_migrating_an_empty_database_together_all_succeed(
    empty_postgres_url: str,
) -> None:
    """Server replicas starting at once on a fresh PostgreSQL database: one migrates, the
    others wait for it (an advisory lock) and find the schema current. Without the lock,
    about half such pairs failed creating alembic_version twice. (SQLite has one server.)"""
    engines = [create_engine(async_database_url(empty_postgres_url)) for _ in range(3)]
    try:
        await asyncio.gather(*(upgrade_database(engine) for engine in engines))
        async with engines[0].connect() as connection:
            assert await connection.run_sync(_diff) == []
    finally:
        for engine in engines:
            await engine.dispose()


async def test_wall_time_migration_converts_data_both_ways(database_url: str) -> None:
    from datetime import UTC, datetime

    from sqlalchemy import text

    engine = create_engine(async_database_url(database_url))
    when = datetime(2026, 11, 22, 9, 30, 15, 250000, tzinfo=UTC)
    try:
        await upgrade_database(engine, "f4e8c2889514")
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO jobs (id, name, strategy, status, spec, priority, restart_count, "
                    "created_at, updated_at) VALUES (1, 'j', 'mirrored', 'pending', '{}', 0, 0, "
                    ":t, :t)"
                ),
                {"t": when},
            )
            await connection.execute(
                text(
                    "INSERT INTO metric_points (job_id, task, attempt, seq, name, step, value, "
                    "wall_time) VALUES (1, 'chief:0', 0, 0, 'loss', 1, 0.5, :t)"
                ),
                {"t": when},
            )
        await upgrade_database(engine, "head")
        async with engine.connect() as connection:
            seconds = (
                await connection.execute(text("SELECT wall_time FROM metric_points"))
            ).scalar()
        assert seconds == pytest.approx(when.timestamp(), abs=1e-3)

        await downgrade_database(engine, "f4e8c2889514")
        async with engine.connect() as connection:
            back = (await connection.execute(text("SELECT wall_time FROM metric_points"))).scalar()
        back_dt = back if isinstance(back, datetime) else datetime.fromisoformat(str(back))
        assert back_dt.replace(tzinfo=UTC).timestamp() == pytest.approx(when.timestamp(), abs=1e-3)
    finally:
        await engine.dispose()


async def test_teams_migration_puts_existing_jobs_in_default_and_keeps_their_tasks(
    database_url: str,
) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    engine = create_engine(async_database_url(database_url))
    job = (
        "INSERT INTO jobs (id, name, strategy, status, spec, priority, restart_count, created_at, "
        "updated_at{extra}) VALUES ({id}, 'j', 'mirrored', 'pending', '{{}}', 0, 0, "
        "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP{value})"
    )
    try:
        await upgrade_database(engine, "5e3a8c1f9b20")
        async with engine.begin() as connection:
            await connection.execute(text(job.format(extra="", id=1, value="")))
            await connection.execute(
                text(
                    'INSERT INTO tasks (job_id, role, "index", status, gpu_indices, attempt, '
                    "created_at) VALUES (1, 'chief', 0, 'pending', '[]', 0, CURRENT_TIMESTAMP)"
                )
            )
        await upgrade_database(engine, "7a1c3e5f9b24")
        async with engine.connect() as connection:
            rows = (
                await connection.execute(
                    text(
                        "SELECT jobs.id, projects.name, jobs.submitted_by FROM jobs "
                        "JOIN projects ON projects.id = jobs.project_id"
                    )
                )
            ).all()
            tasks = (await connection.execute(text("SELECT count(*) FROM tasks"))).scalar()
        assert [tuple(row) for row in rows] == [(1, "default", None)]
        assert tasks == 1  # rebuilding `jobs` would have cascaded into its tasks

        # From now on a job needs a project, and one that exists.
        for extra, value in ((", project_id", ", NULL"), (", project_id", ", 999")):
            with pytest.raises(IntegrityError):
                async with engine.begin() as connection:
                    await connection.execute(text(job.format(extra=extra, id=2, value=value)))

        await downgrade_database(engine, "5e3a8c1f9b20")
        async with engine.connect() as connection:
            tasks = (await connection.execute(text("SELECT count(*) FROM tasks"))).scalar()
            assert tasks == 1
            assert "projects" not in await connection.run_sync(_tables)
    finally:
        await engine.dispose()


async def test_failure_counts_start_at_zero_and_keep_the_tasks(database_url: str) -> None:
    from sqlalchemy import text

    engine = create_engine(async_database_url(database_url))
    try:
        await upgrade_database(engine, "9d4f2b7c1e60")
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO jobs (id, name, strategy, status, spec, priority, restart_count, "
                    "created_at, updated_at, project_id) VALUES (1, 'j', 'mirrored', 'running', "
                    "'{}', 0, 2, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, "
                    "(SELECT id FROM projects WHERE name = 'default'))"
                )
            )
            await connection.execute(
                text(
                    'INSERT INTO tasks (job_id, role, "index", status, gpu_indices, attempt, '
                    "created_at) VALUES (1, 'chief', 0, 'running', '[]', 2, CURRENT_TIMESTAMP)"
                )
            )
        await upgrade_database(engine, "head")
        async with engine.connect() as connection:
            job = (
                await connection.execute(text("SELECT restart_count, failure_count FROM jobs"))
            ).one()
            task = (
                await connection.execute(text("SELECT attempt, failure_count FROM tasks"))
            ).one()
        # What the restarts were is not recorded: each job keeps its whole budget.
        assert tuple(job) == (2, 0) and tuple(task) == (2, 0)
    finally:
        await engine.dispose()
