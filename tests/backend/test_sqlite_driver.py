"""SQLite statements are one trip each to the connection's thread (backend.sqlite_driver),
and answer as SQLAlchemy's own aiosqlite adapter does: rows, row counts, RETURNING, errors."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from backend import sqlite_driver
from backend.db import create_engine

metadata = MetaData()
things = Table(
    "things",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String, unique=True, nullable=False),
)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'driver.sqlite'}")
    async with engine.begin() as connection:
        await connection.run_sync(metadata.create_all)
    yield engine
    await engine.dispose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls queued for aiosqlite's connection threads, by what was called."""
    counted: Counter[str] = Counter()
    queue: Callable[..., Awaitable[Any]] = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        counted[getattr(fn, "__name__", repr(fn))] += 1
        return await queue(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
    return counted


async def test_the_engine_uses_the_one_trip_driver(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        assert isinstance(raw.dbapi_connection, sqlite_driver.OneTripConnection)


async def test_each_statement_is_one_trip(engine: AsyncEngine, trips: Counter[str]) -> None:
    async with engine.begin() as connection:
        await connection.execute(select(things.c.id))  # one connection's first statement
        trips.clear()
        inserted = await connection.execute(
            insert(things).returning(things.c.id), [{"name": "a"}, {"name": "b"}]
        )
        assert len(inserted.all()) == 2
        await connection.execute(insert(things), [{"name": f"n{i}"} for i in range(5)])
        changed = await connection.execute(
            update(things).where(things.c.name.like("n%")).values(name=things.c.name + "!")
        )
        rows = (await connection.execute(select(things.c.name).order_by(things.c.id))).all()
    # Four statements (the second an executemany), each one call: the cursor is opened,
    # run, read and closed there. The old adapter made three or four calls each.
    assert trips["_run"] == 4
    assert trips["cursor"] == trips["fetchall"] == trips["close"] == 0
    assert changed.rowcount == 5
    assert [name for (name,) in rows] == ["a", "b", *(f"n{i}!" for i in range(5))]


async def test_single_row_insert_gives_its_primary_key(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        result = await connection.execute(insert(things).values(name="solo"))
        assert result.inserted_primary_key is not None
        (key,) = result.inserted_primary_key
        assert (await connection.scalar(select(things.c.name).where(things.c.id == key))) == (
            "solo"
        )


async def test_errors_are_sqlalchemys_and_leave_the_connection_usable(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as connection:
        await connection.execute(insert(things).values(name="same"))
    with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: things\.name"):
        async with engine.begin() as connection:
            await connection.execute(insert(things).values(name="same"))
    async with engine.connect() as connection:
        assert (await connection.scalar(select(things.c.name))) == "same"


async def test_streamed_results_still_read_every_row(engine: AsyncEngine) -> None:
    """Server-side cursors keep the adapter's own (a row at a time)."""
    async with engine.begin() as connection:
        await connection.execute(insert(things), [{"name": f"s{i}"} for i in range(50)])
    async with engine.connect() as connection:
        result = await connection.stream(select(things.c.name).order_by(things.c.id))
        names = [name async for (name,) in result]
    assert names == [f"s{i}" for i in range(50)]
