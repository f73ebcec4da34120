"""Which connections client mode needs, established with the client in a network namespace
of its own, behind a firewall, and the server, agent and job on the other side of a veth pair.

Every connection the client opens itself (to the server, to each worker and ps) goes out and
back through the firewall's ESTABLISHED rule. The one the other way: the ps dial the
coordinator when a checkpoint is written (each computes its shard's file name from the
coordinator's prefix). With every incoming connection refused, the first checkpoint fails
with the ps unable to reach the client; with the coordinator's port open, the client trains,
checkpoints and a second client resumes, and nothing else came in.
"""

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
COORDINATOR_PORT = 47000  # the client's gRPC server, inside its namespace


def sh(*argv: str, netns: bool = False) -> str:
    prefix = ["ip", "netns", "exec", NAME] if netns else []
    done = subprocess.run([*prefix, *argv], check=True, capture_output=True, text=True)
    return done.stdout


def counted(target: str) -> int:
    """Packets the namespace's INPUT rules with this target took (ACCEPT: only the
    coordinator port's rule counts, the others match replies and loopback)."""
    rules = sh("iptables", "-L", "INPUT", "-v", "-x", "-n", netns=True).splitlines()
    total = 0
    for line in rules:
        fields = line.split()
        if len(fields) > 2 and fields[2] == target:
            if target == "ACCEPT" and f"dpt:{COORDINATOR_PORT}" not in line:
                continue
            total += int(fields[0])
    return total


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
        # Replies to the client's own connections and its loopback pass; any other incoming
        # connection is refused at once (a reset), and counted.
        for rule in (
            ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
            ["-i", "lo", "-j", "ACCEPT"],
            ["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"],
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


def run(cluster: SplitCluster, job_id: int, epochs: int) -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "tests.support.client_fit", str(epochs), str(job_id)]
    done = subprocess.run(
        ["ip", "netns", "exec", NAME, *argv, str(COORDINATOR_PORT)],
        env={
            **os.environ,
            "STRATA_SERVER": cluster.url,
            "STRATA_TOKEN": cluster.admin_token,
            "PYTHONPATH": str(REPO),
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout, done.stderr


def epoch_lines(stdout: str) -> list[str]:
    return [line.split()[1] for line in stdout.splitlines() if line.startswith("client epoch=")]


def test_the_ps_dial_the_client_only_to_write_checkpoints(cluster: SplitCluster) -> None:
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

    # The firewall works: a connection from the servers' side is refused, and counted.
    with pytest.raises(OSError), socket.create_connection((CLIENT_IP, 9), timeout=2):
        pass
    assert counted("REJECT") > 0
    sh("iptables", "-Z", "INPUT", netns=True)

    # Every incoming connection refused: the steps run, the first checkpoint cannot.
    code, out, err = run(cluster, job_id, epochs=2)
    assert code != 0
    # (The first write to fail may be a checkpoint, which training survives, or a backup.)
    assert f"{CLIENT_IP}:{COORDINATOR_PORT}" in err, err[-3000:]
    assert "UnavailableError" in err, err[-3000:]
    assert counted("REJECT") > 0

    # The coordinator's port open: it trains and checkpoints, a second client resumes from
    # the first one's backup, and nothing but the ps' calls to that port came in.
    sh(
        "iptables",
        "-I",
        "INPUT",
        "3",
        "-p",
        "tcp",
        "--dport",
        str(COORDINATOR_PORT),
        "-j",
        "ACCEPT",
        netns=True,
    )
    sh("iptables", "-Z", "INPUT", netns=True)
    code, out, err = run(cluster, job_id, epochs=2)
    assert code == 0, err[-3000:]
    assert epoch_lines(out) == ["epoch=1", "epoch=2"]
    code, out, err = run(cluster, job_id, epochs=3)
    assert code == 0, err[-3000:]
    assert epoch_lines(out) == ["epoch=3"]
    assert counted("REJECT") == 0
    assert counted("ACCEPT") > 0
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints").json()
    assert {c["epoch"] for c in checkpoints} == {1, 2, 3}
    cluster.http.post(f"/jobs/{job_id}/cancel")
