"""Rows aggregated into one JSON value read back as the ORM reads them, on SQLite and on
PostgreSQL: JSON columns as values, timestamps as aware UTC datetimes, NULLs as None."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

from sqlalchemy import Table, insert, select

from backend.hosts.models import Host
from backend.json_rows import JsonRows
from tests.conftest import Api

HOSTS = cast(Table, Host.__table__)
COLUMNS: dict[str, Any] = {
    "id": HOSTS.c.id,
    "name": HOSTS.c.name,
    "ports_from": HOSTS.c.port_range_start,
    "info": HOSTS.c.info,
    "engine": HOSTS.c.engine,
    "registered_at": HOSTS.c.registered_at,
    "version": HOSTS.c.agent_version,
}


async def test_rows_read_back_as_the_orm_reads_them(quiet_api: Api) -> None:
    seen = datetime(2026, 11, 27, 21, 5, 9, 123456, tzinfo=timezone(timedelta(hours=-5)))
    async with quiet_api.session() as session:
        await session.execute(
            insert(HOSTS),
            [
                {
                    "name": "gpu-a",
                    "address": "10.0.0.1",
                    "status": "online",
                    "port_range_start": 20000,
                    "port_range_end": 21000,
                    "info": {"gpus": [{"name": 'A100 "80GB"', "memory": 81920}], "ü": None},
                    "engine": None,
                    "registered_at": seen,
                    "last_heartbeat_at": seen,
                    "agent_version": "1.4.0",
                },
                {
                    "name": "gpu-b",
                    "address": "10.0.0.2",
                    "status": "online",
                    "port_range_start": 22000,
                    "port_range_end": 23000,
                    "info": {},
                    "engine": {"kind": "docker", "version": 27},
                    "registered_at": datetime(2026, 1, 1, tzinfo=UTC),
                    "last_heartbeat_at": seen,
                    "agent_version": None,
                },
            ],
        )
        await session.commit()
        rows = JsonRows(COLUMNS)
        aggregated = sorted(
            rows.decode((await session.execute(select(rows))).scalar_one()),
            key=lambda row: row["id"],
        )
        hosts = (await session.scalars(select(Host).order_by(Host.id))).all()

    assert aggregated == [
        {
            "id": host.id,
            "name": host.name,
            "ports_from": host.port_range_start,
            "info": host.info,
            "engine": host.engine,
            "registered_at": host.registered_at,
            "version": host.agent_version,
        }
        for host in hosts
    ]
    assert aggregated[0]["registered_at"] == seen
    assert aggregated[0]["registered_at"].tzinfo is UTC
    assert aggregated[1]["engine"] == {"kind": "docker", "version": 27}


async def test_no_rows_read_back_as_an_empty_list(quiet_api: Api) -> None:
    rows = JsonRows(COLUMNS)
    async with quiet_api.session() as session:
        value = (await session.execute(select(rows).where(HOSTS.c.name == "none"))).scalar_one()
    assert rows.decode(value) == []
