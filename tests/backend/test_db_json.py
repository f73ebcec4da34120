"""JSON columns read back exactly what was written, on both databases (the engine reads them
with pydantic-core's parser, not the standard library's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from backend.db import create_engine, session_factory
from backend.jobs.models import JobEvent
from backend.jobs.spec import JobSpec
from backend.migrate import upgrade_database
from tests.conftest import make_settings
from tests.support.factories import create_job, make_spec

AWKWARD: dict[str, Any] = {
    "text": 'naïve — 日本語 "quoted" \\ back\nslash',
    "big": 2**63 + 5,  # past a 64-bit integer
    "negative": -(2**40),
    "float": 0.1 + 0.2,
    "tiny": 5e-324,
    "empty": {"list": [], "object": {}, "string": ""},
    "nested": [[1, [2, [3, None]]], {"true": True, "false": False}],
}


async def test_json_columns_read_back_what_was_written(database_url: str, tmp_path: Path) -> None:
    engine = create_engine(make_settings(database_url, tmp_path / "data").resolved_database_url)
    await upgrade_database(engine)
    try:
        async with session_factory(engine)() as session:
            job = await create_job(
                session=session, spec=JobSpec.model_validate(make_spec("mirrored"))
            )
            session.add(JobEvent(job_id=job.id, kind="note", message="json", data=AWKWARD))
            await session.commit()
        async with session_factory(engine)() as session:
            data = await session.scalar(select(JobEvent.data).where(JobEvent.message == "json"))
        assert data == AWKWARD
        assert type(data["big"]) is int and type(data["float"]) is float
    finally:
        await engine.dispose()
