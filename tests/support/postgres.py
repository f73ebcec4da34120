"""A throwaway PostgreSQL server for the tests, started from the machine's binaries.

Set STRATA_TEST_POSTGRES_URL to use an existing server instead (the tests create and drop
their own databases on it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg


def find_bindir() -> Path | None:
    override = os.environ.get("STRATA_TEST_PG_BINDIR")
    candidates = [Path(override)] if override else []
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "postgres").exists():
            return directory
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"postgres exited with {process.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"postgres did not listen on {port} within {timeout}s")


def _wait_accepting(bindir: Path, port: int, timeout: float = 30.0) -> None:
    """Listening is not ready: until recovery ends, connections get "the database system is
    starting up". pg_isready says when it accepts them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = subprocess.run(
            [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-q"], check=False
        )
        if ready.returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"postgres on {port} did not accept connections within {timeout}s")


@contextlib.contextmanager
def running_postgres(bindir: Path) -> Iterator[str]:
    """Start a fresh cluster on a free loopback port; yield its superuser URL."""
    # initdb refuses to run as root; run the server as the postgres user when we are root.
    user = "postgres" if os.geteuid() == 0 else None
    workdir = Path(tempfile.mkdtemp(prefix="strata-pg-"))
    data, sockets = workdir / "data", workdir / "sock"
    data.mkdir()
    sockets.mkdir()
    if user:
        entry = pwd.getpwnam(user)
        for path in (workdir, data, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    log = workdir / "postgres.log"
    subprocess.run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "strata",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        ],
        check=True,
        capture_output=True,
        user=user,
        cwd=workdir,
    )
    port = free_port()
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-h",
                "127.0.0.1",
                "-k",
                str(sockets),
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            user=user,
            cwd=workdir,
        )
    try:
        _wait_ready(port, process)
        _wait_accepting(bindir, port)
        yield f"postgresql://strata@127.0.0.1:{port}/postgres"
    finally:
        process.terminate()  # SIGTERM: "smart" shutdown after clients leave
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _asyncpg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def create_database(
    admin_url: str, prefix: str = "strata_test", template: str | None = None
) -> str:
    """A fresh database on the server at `admin_url`, empty or a copy of the `template`
    database (which nobody may be connected to); returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = "" if template is None else f' TEMPLATE "{template}"'
    admin = await asyncpg.connect(_asyncpg_dsn(admin_url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"{copy}')
    finally:
        await admin.close()
    return f"{admin_url.rsplit('/', 1)[0]}/{name}"


async def drop_database(admin_url: str, url: str) -> None:
    admin = await asyncpg.connect(_asyncpg_dsn(admin_url))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    finally:
        await admin.close()
