"""Diagnostic: what PostgreSQL spends per metric row, by way of inserting it.

    .venv/bin/python -m bench.pg_insert_paths

The metric ingest benchmark finds PostgreSQL's backend busier than the server itself. This
inserts the same rows straight into the server's `metric_points` table (schema made by the
server's own migrations) in ways that differ in one thing each, and measures rows/s and the
PostgreSQL CPU per row. Results go to bench/results/pg_insert_paths.json and the benchmarks
page. Not a target, just where the time goes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from bench import report
from bench.harness import (
    RESULTS,
    cpu_seconds,
    machine_info,
    postgres_cluster,
    postgres_database,
    postgres_pids,
    spread,
    strata_server,
)

ROWS = 100_000
BATCH = 20_000  # rows per transaction, as one ingest write of four 5,000-point batches
REPEATS = 3
COLUMNS = "job_id, task, attempt, seq, name, step, value, wall_time"
ON_CONFLICT = " ON CONFLICT (job_id, task, attempt, seq) DO NOTHING"
# Built from constants only (table names are ours); values travel as parameters.
PER_ROW = f"INSERT INTO {{table}} ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"  # noqa: S608
UNNEST = (
    f"INSERT INTO {{table}} ({COLUMNS}) SELECT * FROM unnest($1::int[], $2::text[], "  # noqa: S608
    "$3::int[], $4::bigint[], $5::text[], $6::bigint[], $7::float8[], $8::float8[])"
)


def _rows(job_id: int, task: str, first: int, count: int) -> list[tuple[Any, ...]]:
    return [
        (job_id, task, 0, seq, "loss", seq, 0.5, 1.7e9 + seq) for seq in range(first, first + count)
    ]


async def _per_row(db: asyncpg.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    await db.executemany(sql, rows)  # what SQLAlchemy's exec_driver_sql does with a list


async def _arrays(db: asyncpg.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    await db.execute(sql, *(list(column) for column in zip(*rows, strict=True)))


Insert = Callable[[asyncpg.Connection, str, list[tuple[Any, ...]]], Any]
PATHS: list[tuple[str, str, Insert]] = [
    ("executemany, one INSERT per row (the server today)", PER_ROW + ON_CONFLICT, _per_row),
    ("one INSERT ... SELECT unnest(arrays) per batch", UNNEST + ON_CONFLICT, _arrays),
    ("unnest, table without the jobs foreign key", UNNEST + ON_CONFLICT, _arrays),
    ("unnest, no foreign key, no ON CONFLICT", UNNEST, _arrays),
]


async def _measure(url: str, job_id: int, path: int, repeat: int) -> dict[str, float]:
    _, sql, insert = PATHS[path]
    table = "metric_points" if path < 2 else "metric_points_nofk"
    db = await asyncpg.connect(url)
    try:
        pids = postgres_pids(url)
        task = f"worker:{path * 10 + repeat}"  # fresh sequence numbers for every measurement
        before, began = sum(cpu_seconds(p) for p in pids), time.perf_counter()
        for first in range(0, ROWS, BATCH):
            async with db.transaction():
                await insert(db, sql.format(table=table), _rows(job_id, task, first, BATCH))
        elapsed = time.perf_counter() - began
        used = sum(cpu_seconds(p) for p in postgres_pids(url)) - before
    finally:
        await db.close()
    return {"rows_per_s": ROWS / elapsed, "postgres_us_per_row": 1e6 * used / ROWS}


async def _prepare(url: str) -> None:
    db = await asyncpg.connect(url)
    try:
        # LIKE copies columns, defaults, indexes and the unique key, but no foreign keys.
        await db.execute("CREATE TABLE metric_points_nofk (LIKE metric_points INCLUDING ALL)")
    finally:
        await db.close()


def main() -> int:
    results: dict[str, Any] = {"rows": ROWS, "batch": BATCH, "paths": []}
    with postgres_cluster() as admin_url:
        results["machine"] = machine_info(admin_url)
        with postgres_database(admin_url) as url, strata_server(url) as server:
            job_id = server.submit()  # metric rows reference a real job
            asyncio.run(_prepare(url))
            measured: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(PATHS))}
            for repeat in range(REPEATS):  # interleaved, so drift hits every path alike
                for path in range(len(PATHS)):
                    measured[path].append(asyncio.run(_measure(url, job_id, path, repeat)))
    for path, runs in measured.items():
        entry: dict[str, Any] = {
            "path": PATHS[path][0],
            "rows_per_s": spread([r["rows_per_s"] for r in runs]),
            "postgres_us_per_row": spread([r["postgres_us_per_row"] for r in runs]),
        }
        results["paths"].append(entry)
        print(
            f"  {entry['path']}: {entry['rows_per_s']['median']:,.0f} rows/s, "
            f"{entry['postgres_us_per_row']['median']:.1f} µs PostgreSQL CPU per row"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pg_insert_paths.json").write_text(json.dumps(results, indent=2) + "\n")
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
