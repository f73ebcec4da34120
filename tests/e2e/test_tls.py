"""TLS: `strata server` on HTTPS/WSS with its own certificate; the CLI, an agent and a task's
runtime trust it through a CA file, and refuse it without one."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.postgres import free_port
from tests.support.processes import STRATA, stop
from tests.support.strict import missing_dependency

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
# A runtime that reports one point and waits until the server has acknowledged it.
REPORT_ONE_POINT = (
    "from agents.runtime.process_sink import get_sender; s = get_sender(); "
    "s.put('tls/check', 1.0, 1); assert s.flush(30), 'not acknowledged'; print('reported')"
)


def make_certificate(directory: Path) -> Path:
    """A self-signed certificate for 127.0.0.1: it is its own CA file."""
    if shutil.which("openssl") is None:
        missing_dependency("openssl is not installed (apt-get install openssl)")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(directory / "key.pem"),
            "-out",
            str(directory / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )
    return directory / "cert.pem"


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    directory = tmp_path_factory.mktemp("tls")
    cert = make_certificate(directory)
    port = free_port()
    env = clean_env() | {
        "STRATA_API_TOKEN": ADMIN_TOKEN,
        "STRATA_AGENT_TOKEN": AGENT_TOKEN,
        "STRATA_DATA_DIR": str(directory / "data"),
        "STRATA_PORT": str(port),
        "STRATA_TLS_CERTFILE": str(cert),
        "STRATA_TLS_KEYFILE": str(directory / "key.pem"),
    }
    log = (directory / "server.log").open("wb")
    process = subprocess.Popen([*STRATA, "server"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    trust = ssl.create_default_context(cafile=str(cert))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (directory / "server.log").read_text()
            try:
                if httpx.get(f"{url}/healthz", verify=trust, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the TLS server did not come up"
            time.sleep(0.3)
        yield url, cert
    finally:
        stop(process)
        log.close()


def strata(*args: str, url: str, ca: Path | None) -> subprocess.CompletedProcess[str]:
    env = clean_env() | {"STRATA_SERVER": url, "STRATA_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
    options = ["--ca-file", str(ca)] if ca is not None else []
    return subprocess.run(
        [*STRATA, *options, *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_plain_http_is_not_served(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https://", "http://") + "/healthz", timeout=5)


def test_the_cli_verifies_the_server(tls_server: tuple[str, Path]) -> None:
    url, cert = tls_server
    trusted = strata("hosts", url=url, ca=cert)
    assert trusted.returncode == 0, trusted.stderr
    untrusted = strata("hosts", url=url, ca=None)
    assert untrusted.returncode == 1
    assert "cannot reach the server" in untrusted.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr.replace(" ", "_").upper()


def test_an_agent_and_its_task_trust_the_server_through_the_ca_file(
    tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, cert = tls_server
    http = httpx.Client(
        base_url=url,
        verify=ssl.create_default_context(cafile=str(cert)),
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )

    def start_agent(name: str, ca: Path | None) -> subprocess.Popen[bytes]:
        options = ["--ca-file", str(ca)] if ca is not None else []
        return subprocess.Popen(
            [
                *STRATA,
                "agent",
                "--server",
                url,
                "--name",
                name,
                "--gpus",
                "1",
                "--port-range",
                "23500-23549" if ca else "23550-23599",
                "--workspace",
                str(REPO),
                *options,
            ],
            # No warm processes, like every agent the suite starts (tests/conftest.py).
            env=clean_env() | {"STRATA_AGENT_TOKEN": AGENT_TOKEN, "STRATA_AGENT_WARM_POOL": "0"},
            stdout=(tmp_path / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )

    trusting, doubting = start_agent("trusting", cert), start_agent("doubting", None)
    try:
        deadline = time.monotonic() + 60
        while not any(h["name"] == "trusting" for h in http.get("/hosts").json()):
            assert time.monotonic() < deadline, (tmp_path / "trusting.log").read_text()
            time.sleep(0.3)
        spec = {
            "name": "tls-runtime",
            "strategy": "mirrored",
            "entrypoint": ["python", "-c", REPORT_ONE_POINT],
            "replicas": {"chief": {"count": 1, "gpus": 1}},
            "restart": {"policy": "never"},
        }
        job = http.post("/jobs", json=spec).json()
        while (found := http.get(f"/jobs/{job['id']}").json())["status"] not in (
            "succeeded",
            "failed",
        ):
            assert time.monotonic() < deadline + 120, found
            time.sleep(0.5)
        lines = http.get(f"/jobs/{job['id']}/tasks/chief:0/logs").json()["lines"]
        assert found["status"] == "succeeded", lines
        assert "reported" in lines
        metrics = http.get(f"/jobs/{job['id']}/metrics").json()
        assert "tls/check" in str(metrics), metrics

        # The agent without the CA file never joins: it cannot verify the server.
        hosts = {h["name"] for h in http.get("/hosts").json()}
        assert "doubting" not in hosts
        assert "CERTIFICATE_VERIFY_FAILED" in (tmp_path / "doubting.log").read_text()
    finally:
        stop(trusting)
        stop(doubting)
        http.close()
