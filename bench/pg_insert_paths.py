"""Diagnostic: what PostgreSQL spends per metric row, by way of inserting it.

    .venv/bin/python -m bench.pg_insert_paths

The metric ingest benchmark finds PostgreSQL's backend about as busy as the server itself.
This inserts the same rows straight into the server's `metric_points` table (schema made by
the server's own migrations) in ways that differ in one thing each, and measures rows/s, the
PostgreSQL CPU per row and the client's (asyncpg encoding the parameters, in Python's
thread: in the server, that is the event loop's time). Results go to
bench/results/pg_insert_paths.json and the benchmarks page. Not a target, just where the
time goes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from bench import report
from bench.harness import (
    cpu_seconds,
    machine_info,
    postgres_cluster,
    postgres_database,
    postgres_pids,
    spread,
    strata_server,
    write_result,
)

ROWS = 100_000
BATCH = 20_000  # rows per transaction, as one ingest write of four 5,000-point batches
ATTEMPTS = 4  # task attempts per transaction, 5,000 rows each
REPEATS = 3
COLUMNS = "job_id, task, attempt, seq, name, step, value, wall_time"
ON_CONFLICT = " ON CONFLICT (job_id, task, attempt, seq) DO NOTHING"
# Built from constants only; values travel as parameters.
PER_ROW = f"INSERT INTO metric_points ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"  # noqa: S608
UNNEST_ALL = (
    f"INSERT INTO metric_points ({COLUMNS}) SELECT * FROM unnest($1::integer[], "  # noqa: S608
    "$2::varchar[], $3::integer[], $4::bigint[], $5::varchar[], $6::bigint[], "
    "$7::double precision[], $8::double precision[])"
)
# What the server's ingest does (backend/streams/ingest.py): the attempt as constants.
UNNEST_ATTEMPT = (
    f"INSERT INTO metric_points ({COLUMNS}) SELECT $1::integer, $2::varchar, "  # noqa: S608
    "$3::integer, u.* FROM unnest($4::bigint[], $5::varchar[], $6::bigint[], "
    "$7::double precision[], $8::double precision[]) AS u"
)
NAMES = ("loss", "accuracy", "learning_rate", "steps_per_sec")

Row = tuple[Any, ...]


def _attempts(job_id: int, tag: str, first: int) -> list[tuple[str, list[Row]]]:
    """One transaction's rows: ATTEMPTS task attempts, BATCH // ATTEMPTS points each."""
    per = BATCH // ATTEMPTS
    out = []
    for attempt in range(ATTEMPTS):
        task = f"worker:{tag}{attempt}"
        seqs = range(first // ATTEMPTS, first // ATTEMPTS + per)
        rows = [
            (job_id, task, 0, s, NAMES[s % 4], s // 4, 1.0 / (1 + s), 1.7e9 + s / 1000)
            for s in seqs
        ]
        out.append((task, rows))
    return out


async def _per_row(db: asyncpg.Connection, sql: str, batch: list[tuple[str, list[Row]]]) -> None:
    # What SQLAlchemy's exec_driver_sql does with a list of rows.
    await db.executemany(sql, [row for _, rows in batch for row in rows])


async def _unnest_all(db: asyncpg.Connection, sql: str, batch: list[tuple[str, list[Row]]]) -> None:
    rows = [row for _, rows in batch for row in rows]
    await db.execute(sql, *(list(column) for column in zip(*rows, strict=True)))


async def _unnest_attempt(
    db: asyncpg.Connection, sql: str, batch: list[tuple[str, list[Row]]]
) -> None:
    for _, rows in batch:
        job_id, task, attempt = rows[0][:3]
        columns = [[row[i] for row in rows] for i in range(3, 8)]
        await db.execute(sql, job_id, task, attempt, *columns)


Insert = Callable[[asyncpg.Connection, str, list[tuple[str, list[Row]]]], Any]
PATHS: list[tuple[str, str, Insert]] = [
    ("executemany, one INSERT per row", PER_ROW + ON_CONFLICT, _per_row),
    ("one unnest of 8 column arrays per write, ON CONFLICT", UNNEST_ALL + ON_CONFLICT, _unnest_all),
    (
        "one unnest of 5 arrays per task attempt, ON CONFLICT",
        UNNEST_ATTEMPT + ON_CONFLICT,
        _unnest_attempt,
    ),
    (
        "one unnest of 5 arrays per task attempt, no ON CONFLICT (the server today)",
        UNNEST_ATTEMPT,
        _unnest_attempt,
    ),
]


async def _measure(url: str, job_id: int, path: int, repeat: int) -> dict[str, float]:
    _, sql, insert = PATHS[path]
    db = await asyncpg.connect(url)
    try:
        pids = postgres_pids(url)
        tag = f"{path}{repeat}"  # fresh task names, so fresh sequence numbers, every time
        batches = [_attempts(job_id, tag, first) for first in range(0, ROWS, BATCH)]
        before, began = sum(cpu_seconds(p) for p in pids), time.perf_counter()
        client = time.process_time()
        for batch in batches:
            async with db.transaction():
                await insert(db, sql, batch)
        client = time.process_time() - client
        elapsed = time.perf_counter() - began
        used = sum(cpu_seconds(p) for p in postgres_pids(url)) - before
    finally:
        await db.close()
    return {
        "rows_per_s": ROWS / elapsed,
        "postgres_us_per_row": 1e6 * used / ROWS,
        "client_us_per_row": 1e6 * client / ROWS,
    }


def main() -> int:
    results: dict[str, Any] = {"rows": ROWS, "batch": BATCH, "paths": []}
    with postgres_cluster() as admin_url:
        results["machine"] = machine_info(admin_url)
        with postgres_database(admin_url) as url, strata_server(url) as server:
            job_id = server.submit()
            measured: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(PATHS))}
            for repeat in range(REPEATS):  # interleaved, so drift hits every path alike
                for path in range(len(PATHS)):
                    measured[path].append(asyncio.run(_measure(url, job_id, path, repeat)))
    for path, runs in measured.items():
        entry: dict[str, Any] = {
            "path": PATHS[path][0],
            "rows_per_s": spread([r["rows_per_s"] for r in runs]),
            "postgres_us_per_row": spread([r["postgres_us_per_row"] for r in runs]),
            "client_us_per_row": spread([r["client_us_per_row"] for r in runs]),
        }
        results["paths"].append(entry)
        print(
            f"  {entry['path']}: {entry['rows_per_s']['median']:,.0f} rows/s, "
            f"{entry['postgres_us_per_row']['median']:.1f} µs PostgreSQL CPU and "
            f"{entry['client_us_per_row']['median']:.1f} µs client CPU per row"
        )
    write_result("pg_insert_paths", results)
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
