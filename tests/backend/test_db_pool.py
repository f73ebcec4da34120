"""The engine keeps its connections: a burst of sessions beside one another opens each
connection once, not again for every burst (backend.db.POOL_SIZE)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import event, text

from backend.config import async_database_url
from backend.db import POOL_SIZE, create_engine, session_factory


async def test_bursts_of_sessions_reuse_the_connections(database_url: str, tmp_path: Path) -> None:
    engine = create_engine(async_database_url(database_url))
    opened = 0

    def count(*_: object) -> None:
        nonlocal opened
        opened += 1

    event.listen(engine.sync_engine, "connect", count)
    sessions = session_factory(engine)
    burst = 12  # more than SQLAlchemy's default pool (5), within ours
    assert burst <= POOL_SIZE
    all_in = asyncio.Barrier(burst)

    async def one() -> None:
        async with sessions() as session:
            await session.execute(text("SELECT 1"))
            await all_in.wait()  # every session holds its connection at once

    try:
        for _ in range(3):
            await asyncio.gather(*(one() for _ in range(burst)))
            all_in = asyncio.Barrier(burst)
    finally:
        await engine.dispose()
    assert opened == burst
