"""What every benchmark needs: a real server (SQLite or PostgreSQL), jobs, tokens, stats.

The server runs as its own process, exactly as `strata server` runs in production, so that
what is measured is the real stack (uvicorn, FastAPI, SQLAlchemy, the database driver) and
the benchmark's own CPU use shows up separately from the server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import platform
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from pydantic import SecretStr

from backend.auth import TokenKind, TokenRegistry
from tests.support.postgres import find_bindir, free_port, running_postgres
from tests.support.processes import STRATA, stop, wait_healthy

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

# A parameter-server job that no agent will ever place: it stays pending, which is all the
# runtime channel needs (the task rows exist, attempt 0).
PENDING_JOB: dict[str, Any] = {
    "name": "bench",
    "strategy": "parameter_server",
    "entrypoint": ["python", "x"],
    "replicas": {"chief": {"count": 1}, "worker": {"count": 4}, "ps": {"count": 1}},
}


@dataclass
class Server:
    """A running `strata server` and what a benchmark needs to talk to it."""

    url: str
    admin_token: str
    agent_token: str
    database: str  # "sqlite" or "postgresql"
    database_url: str
    process: subprocess.Popen[bytes]
    data_dir: Path

    @property
    def ws_url(self) -> str:
        return "ws" + self.url.removeprefix("http")

    def submit(self, spec: dict[str, Any] | None = None) -> int:
        response = httpx.post(
            f"{self.url}/jobs",
            json=spec or PENDING_JOB,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )
        response.raise_for_status()
        job_id: int = response.json()["id"]
        return job_id

    def cancel(self, job_id: int) -> None:
        """Ends a bench job: pending jobs are re-examined on every controller pass (each
        0.5 s), so leaving them behind would make later runs pay for earlier ones."""
        httpx.post(
            f"{self.url}/jobs/{job_id}/cancel",
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        ).raise_for_status()

    @contextlib.contextmanager
    def job(self, spec: dict[str, Any] | None = None) -> Iterator[int]:
        """A job for the duration of a run, cancelled afterwards."""
        job_id = self.submit(spec)
        try:
            yield job_id
        finally:
            self.cancel(job_id)

    def task_token(self, job_id: int) -> str:
        # Derived exactly as the server derives it (HMAC of the admin token), so the
        # benchmark needs no agent to hand it out.
        return TokenRegistry({TokenKind.admin: SecretStr(self.admin_token)}).task_token(job_id)

    def stored_points(self, job_id: int) -> int:
        """Rows in metric_points for a job, read straight from the database."""
        query = "SELECT count(*) FROM metric_points WHERE job_id = "
        if self.database == "sqlite":
            with contextlib.closing(sqlite3.connect(self.data_dir / "strata.db")) as db:
                count: int = db.execute(query + "?", (job_id,)).fetchone()[0]
                return count
        return int(asyncio.run(_pg_scalar(self.database_url, query + "$1", job_id)))


async def _pg_scalar(url: str, query: str, *args: object) -> Any:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(query, *args)
    finally:
        await connection.close()


@contextlib.contextmanager
def strata_server(
    database_url: str | None = None, extra_env: dict[str, str] | None = None
) -> Iterator[Server]:
    """`strata server` on a free port with a temporary data dir (SQLite there by default)."""
    workdir = Path(tempfile.mkdtemp(prefix="strata-bench-"))
    data_dir = workdir / "data"
    port = free_port()
    admin, agent = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "STRATA_API_TOKEN": admin,
        "STRATA_AGENT_TOKEN": agent,
        "STRATA_DATA_DIR": str(data_dir),
        "STRATA_PORT": str(port),
        "STRATA_LOG_LEVEL": "warning",
    }
    if database_url:
        env["STRATA_DATABASE_URL"] = database_url
    env |= extra_env or {}
    log_path = workdir / "server.log"
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*STRATA, "server"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
        )
    try:
        wait_healthy(url, process)
        yield Server(
            url=url,
            admin_token=admin,
            agent_token=agent,
            database="postgresql" if database_url else "sqlite",
            database_url=database_url or f"sqlite:///{data_dir / 'strata.db'}",
            process=process,
            data_dir=data_dir,
        )
    except BaseException:
        print(f"server log ({log_path}):\n{log_path.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def postgres_cluster() -> Iterator[str]:
    """A throwaway PostgreSQL cluster (the tests' one: fsync off); yields a superuser URL."""
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
    with running_postgres(bindir) as url:
        yield url


@contextlib.contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """A fresh database on the cluster, dropped afterwards; yields its URL."""
    name = f"strata_bench_{uuid.uuid4().hex[:10]}"
    asyncio.run(_pg_execute(admin_url, f'CREATE DATABASE "{name}"'))
    try:
        yield f"{admin_url.rsplit('/', 1)[0]}/{name}"
    finally:
        asyncio.run(_pg_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _pg_execute(url: str, statement: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


# --- CPU accounting ------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used (all cores), from /proc/stat.

    Compared with our own processes' CPU over the same interval it shows how much of the
    machine other tenants took while we measured.
    """
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / _TICKS


def pids_listening_on(port: int) -> list[int]:
    """Processes whose command line names this port (a postmaster and its backends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"postgres" in argv[0] and str(port).encode() in argv:
                found.append(int(entry.name))
    return found


def postgres_pids(admin_url: str) -> list[int]:
    """The postmaster of the bench's cluster and all of its children (the backends)."""
    port = int(admin_url.rsplit(":", 1)[1].split("/", 1)[0])
    roots = pids_listening_on(port)
    pids = list(roots)
    for root in roots:
        with contextlib.suppress(OSError):
            pids += [int(p) for p in Path(f"/proc/{root}/task/{root}/children").read_text().split()]
    return pids


# --- statistics and machine ------------------------------------------------------------------


def write_result(name: str, result: object) -> Path:
    """bench/results/<name>.json, as docs/benchmarks.md and the plots read it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def measured_on() -> dict[str, str]:
    """The commit a run measured (with "+changes" when the tree had uncommitted changes) and
    the day: results from several runs share a page, each says what it is of."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short=7", "HEAD") or "unknown"
    # Results written by earlier runs are not changes to what is measured.
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"):
        commit += "+changes"
    return {"commit": commit, "date": datetime.datetime.now(datetime.UTC).date().isoformat()}


def machine_info(postgres_admin_url: str | None = None) -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "kernel": platform.release(),
    }
    if postgres_admin_url:
        info["postgresql"] = asyncio.run(_pg_scalar(postgres_admin_url, "SHOW server_version"))
    return info


class Conditions:
    """Keeps other tenants of this shared machine from deciding the results, within limits.

    Before a run, wait (up to `max_wait` s, `wait_budget` s per invocation in all) for the
    machine's background load to fall below `quiet` cores. A run during which other
    processes used more than `disturbed` cores is marked disturbed and, up to `extra` times
    per measurement, made up for by another run. Summaries use the undisturbed runs.
    """

    def __init__(
        self,
        *,
        quiet: float = 0.3,
        disturbed: float = 0.5,
        max_wait: float = 20.0,
        wait_budget: float = 90.0,
        extra: int = 2,
    ) -> None:
        self.quiet = quiet
        self.disturbed = disturbed
        self.max_wait = max_wait
        self.wait_budget = wait_budget
        self.extra = extra

    def wait_quiet(self, window: float = 1.0) -> float:
        """Waits for a quiet machine; returns the background load (cores) seen last."""
        began = time.monotonic()
        while True:
            before = machine_busy_seconds()
            time.sleep(window)
            background = (machine_busy_seconds() - before) / window
            waited = time.monotonic() - began
            if background <= self.quiet or waited >= min(self.max_wait, self.wait_budget):
                self.wait_budget = max(0.0, self.wait_budget - waited)
                return round(background, 2)

    def describe(self) -> dict[str, float]:
        return {"quiet_cores": self.quiet, "disturbed_cores": self.disturbed, "extra": self.extra}


def repeat_runs(
    measure: Callable[[int], dict[str, Any]], count: int, conditions: Conditions
) -> list[dict[str, Any]]:
    """Runs `measure(attempt)` until `count` runs were undisturbed, or `extra` more were made.

    Each result must carry `seconds` and `cpu_seconds["others"]`; it gains `others_cores`,
    `background_cores_before` and `disturbed`.
    """
    runs: list[dict[str, Any]] = []
    while len(runs) < count + conditions.extra and len(undisturbed(runs)) < count:
        background = conditions.wait_quiet()
        result = measure(len(runs))
        result["background_cores_before"] = background
        result["others_cores"] = round(result["cpu_seconds"]["others"] / result["seconds"], 2)
        result["disturbed"] = result["others_cores"] > conditions.disturbed
        runs.append(result)
    return runs


def undisturbed(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs a summary should use: the undisturbed ones, or all if every one was."""
    return [r for r in runs if not r["disturbed"]] or runs
