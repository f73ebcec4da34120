"""HAProxy (Debian's package) in front of several servers, for the tests of server replicas.

One frontend on a free loopback port, round robin over the backends, each checked on
`GET /healthz` twice a second; a connection that fails is tried again on another backend
(`retries`, `option redispatch`), so a replica that dies costs a client no failed request once
HAProxy has seen it fail. Websockets pass through (`timeout tunnel`): a websocket stays on the
replica it reached until that replica goes, and the client reconnects through the frontend.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.postgres import free_port
from tests.support.strict import missing_dependency

CHECK_INTERVAL_MS = 500


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").is_file() else None
    )
    if found is None:
        missing_dependency("haproxy is not installed (Debian's haproxy package)")
    return found


def config_text(port: int, backends: Sequence[str], check_path: str = "/healthz") -> str:
    """The configuration for a frontend on `port` over `backends` ("127.0.0.1:8001", ...)."""
    servers = "\n".join(
        f"    server replica{index} {address} check" for index, address in enumerate(backends)
    )
    return f"""global
    maxconn 4096

defaults
    mode http
    timeout connect 1s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    retries 3
    option redispatch

frontend strata
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET {check_path}
    http-check expect status 200
    default-server inter {CHECK_INTERVAL_MS}ms fall 2 rise 1
{servers}
"""


@dataclass
class LoadBalancer:
    url: str  # http://127.0.0.1:<port>, the frontend
    process: subprocess.Popen[bytes]
    log: Path


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"haproxy exited {process.returncode}: {log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise AssertionError(f"haproxy did not listen on {port}: {log.read_text()}")


@contextlib.contextmanager
def load_balancer(backends: Sequence[str], directory: Path) -> Iterator[LoadBalancer]:
    """HAProxy over `backends` until the block ends (its config and log in `directory`)."""
    binary = haproxy_binary()
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = directory / "haproxy.cfg"
    config.write_text(config_text(port, backends))
    log = directory / "haproxy.log"
    with log.open("wb") as output:
        # -db: in the foreground, its messages on stderr; -W would fork a master: not wanted.
        process = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=output, stderr=output)
    try:
        _wait_listening(port, process, log)
        yield LoadBalancer(url=f"http://127.0.0.1:{port}", process=process, log=log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
