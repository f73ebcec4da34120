"""Bringing a database's schema up to date with the project's Alembic migrations."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

# Migration files are named by date and slug, e.g. 20261122_initial_schema.py.
FILE_TEMPLATE = "%%(year)d%%(month).2d%%(day).2d_%%(slug)s"

# migrations/ sits beside the backend package: at the repository's top level, and in
# site-packages once installed (the wheel ships it as a package of its own).
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("file_template", FILE_TEMPLATE)
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _upgrade(connection: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


# Held for the migration's transaction on PostgreSQL: server replicas starting together
# migrate one after another (the second finds the schema current), rather than both creating
# the same tables at once and one failing.
MIGRATION_LOCK = 0x5374726174614D67  # an advisory lock's key: "StrataMg"


async def upgrade_database(engine: AsyncEngine, revision: str = "head") -> None:
    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            await connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK}
            )
        await connection.run_sync(_upgrade, revision)
