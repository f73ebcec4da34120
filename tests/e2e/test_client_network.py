"""Which connections client mode needs: the client, in a network namespace that refuses
every incoming connection, coordinates a job whose servers and agents are on the other side
of a veth pair. It trains, and the namespace's firewall saw no connection attempt from the
servers' side (while a probe from that side shows the firewall works)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import SplitCluster
from tests.support.postgres import free_port
from tests.support.processes import stop
from tests.support.strict import missing_dependency

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NAME = f"stcl{os.getpid() % 100000}"
SUBNET = f"10.201.{os.getpid() % 250}"
HOST_IP, CLIENT_IP = f"{SUBNET}.1", f"{SUBNET}.2"


def sh(*argv: str, netns: bool = False) -> str:
    prefix = ["ip", "netns", "exec", NAME] if netns else []
    done = subprocess.run([*prefix, *argv], check=True, capture_output=True, text=True)
    return done.stdout


def dropped() -> int:
    """Packets the namespace's firewall dropped: connection attempts from outside."""
    rules = sh("iptables", "-L", "INPUT", "-v", "-x", "-n", netns=True).splitlines()
    return sum(int(line.split()[0]) for line in rules if " DROP " in f" {line} ")


@pytest.fixture
def client_namespace() -> Iterator[None]:
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("iptables")):
        missing_dependency("root with ip (iproute2) and iptables, to make a network namespace")
    sh("ip", "netns", "add", NAME)
    try:
        sh("ip", "link", "add", f"{NAME}h", "type", "veth", "peer", "name", f"{NAME}c")
        sh("ip", "link", "set", f"{NAME}c", "netns", NAME)
        sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", f"{NAME}h")
        sh("ip", "link", "set", f"{NAME}h", "up")
        sh("ip", "addr", "add", f"{CLIENT_IP}/30", "dev", f"{NAME}c", netns=True)
        sh("ip", "link", "set", f"{NAME}c", "up", netns=True)
        sh("ip", "link", "set", "lo", "up", netns=True)
        # Replies to the client's own connections and its loopback pass; anything else that
        # comes in is dropped (and counted).
        for rule in (
            ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
            ["-i", "lo", "-j", "ACCEPT"],
            ["-j", "DROP"],
        ):
            sh("iptables", "-A", "INPUT", *rule, netns=True)
        yield
    finally:
        subprocess.run(["ip", "link", "del", f"{NAME}h"], capture_output=True)
        subprocess.run(["ip", "netns", "del", NAME], capture_output=True)


@pytest.fixture
def cluster(client_namespace: None, tmp_path: Path) -> Iterator[SplitCluster]:
    """`strata server` on the host's end of the veth pair, one agent whose tasks are reached
    there."""
    port = free_port()
    url = f"http://{HOST_IP}:{port}"
    admin = "net-admin-token"
    cluster = SplitCluster(
        url=url,
        admin_token=admin,
        agent_token="net-agent-token",
        data_dir=tmp_path,
        process=subprocess.Popen(["true"]),
        http=httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30),
    )
    cluster.server_args = [sys.executable, "-m", "backend.cli", "server"]
    cluster.server_env = {
        **os.environ,
        "STRATA_API_TOKEN": admin,
        "STRATA_AGENT_TOKEN": cluster.agent_token,
        "STRATA_DATA_DIR": str(tmp_path),
        "STRATA_HOST": HOST_IP,
        "STRATA_PORT": str(port),
    }
    try:
        cluster.start_server()
        cluster.start_agent("net-0", 2, "25400-25499", address=HOST_IP)
        cluster.wait_host("net-0", "online")
        yield cluster
    finally:
        cluster.stop_extra_agents()
        stop(cluster.process)
        cluster.http.close()


def test_the_client_needs_no_incoming_connection(cluster: SplitCluster) -> None:
    job_id = cluster.submit(
        {
            "name": "client-behind-a-firewall",
            "strategy": "parameter_server",
            "coordinator": "client",
            "replicas": {"worker": {"count": 2}, "ps": {"count": 1}},
        }
    )["id"]
    job = cluster.wait_status(job_id, "running")
    assert {task["host"] for task in job["tasks"]} == {"net-0"}

    # The firewall works: a connection from the servers' side is dropped, and counted.
    with pytest.raises(OSError), socket.create_connection((CLIENT_IP, 9), timeout=1):
        pass
    assert dropped() > 0
    sh("iptables", "-Z", "INPUT", netns=True)

    client = subprocess.run(
        ["ip", "netns", "exec", NAME, sys.executable, "-m", "tests.support.client_fit", "2"],
        env={
            **os.environ,
            "STRATA_SERVER": cluster.url,
            "STRATA_TOKEN": cluster.admin_token,
            "PYTHONPATH": str(REPO),
            "STRATA_JOB": str(job_id),
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert client.returncode == 0, client.stderr[-3000:]
    assert "client epoch=2 " in client.stdout
    assert dropped() == 0  # no worker, ps or server tried to reach the client
    cluster.http.post(f"/jobs/{job_id}/cancel")
