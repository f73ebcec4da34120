"""Starting real Strata processes for tests, and waiting for them to be ready."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

from tests.support.postgres import free_port

STRATA = [sys.executable, "-m", "backend.cli"]


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    """Returns once the server answers /healthz; its start can take a while beside the
    TensorFlow clusters and the image builds of other test files."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before it was healthy")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"server at {url} not healthy within {timeout}s")


def stop(process: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGINT (what Ctrl-C sends), then SIGKILL if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def strata_server(
    data_dir: Path, env: Mapping[str, str], database_url: str | None = None
) -> Iterator[str]:
    """`strata server` on a free loopback port; yields its URL."""
    port = free_port()
    full_env = {**os.environ, **env, "STRATA_DATA_DIR": str(data_dir), "STRATA_PORT": str(port)}
    if database_url:
        full_env["STRATA_DATABASE_URL"] = database_url
    log = (data_dir.parent / f"server-{port}.log").open("wb")
    process = subprocess.Popen(
        [*STRATA, "server"], env=full_env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        stop(process)
        log.close()
