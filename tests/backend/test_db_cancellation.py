"""A database call awaited with `to_the_end` survives its caller's cancellation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from backend.db import create_engine, session_factory, to_the_end

# Counting to a few million in SQL: long enough to be cancelled many times mid-query.
SLOW_COUNT = text(
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000)"
    " SELECT count(*) FROM n"
)


async def test_a_query_cancelled_again_and_again_finishes_and_the_engine_closes(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    sessions = session_factory(engine)
    finished: list[int] = []

    async def count() -> int:
        async with sessions() as session:
            result = int((await session.execute(SLOW_COUNT)).scalar_one())
        finished.append(result)
        return result

    async def handler() -> None:
        await to_the_end(count())

    task = asyncio.create_task(handler())
    await asyncio.sleep(0.05)
    # As an anyio cancel scope does: cancel again on every pass until the task is done.
    while not task.done():
        task.cancel()
        await asyncio.sleep(0.001)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == [3_000_000]
    await asyncio.wait_for(engine.dispose(), timeout=10)


async def test_the_result_and_errors_of_the_call_pass_through(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    async with session_factory(engine)() as session:
        assert await to_the_end(session.scalar(text("SELECT 41 + 1"))) == 42
        with pytest.raises(Exception, match="no such table: missing_table"):
            await to_the_end(session.execute(text("SELECT * FROM missing_table")))
    await engine.dispose()
