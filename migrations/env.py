"""Alembic environment: migrates the database named in the config, or a connection handed in."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from backend.config import async_database_url
from backend.db import create_engine
from backend.models import Base

config = context.config
target_metadata = Base.metadata


def run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async(url: str) -> None:
    engine = create_engine(async_database_url(url))
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_with)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
elif (handed_in := config.attributes.get("connection")) is not None:
    run_with(handed_in)
else:
    asyncio.run(run_async(config.get_main_option("sqlalchemy.url") or ""))
