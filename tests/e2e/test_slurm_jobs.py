"""A parameter-server job on a real two-node Slurm cluster: one Slurm job, an agent per node.

`strata server` with the Slurm backend on; Slurm (tests/support/slurm.py) runs the batch
script, which srun's the real `strata agent` on n1 and n2 with the job's agent token. Both
nodes are this machine, so the agents' port ranges are told apart by the node's number.
"""

from __future__ import annotations

import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.cluster import wait_no_processes
from tests.support.processes import strata_server
from tests.support.slurm import SlurmCluster, slurm_cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EPOCH_LINE = re.compile(r"epoch=(\d+) loss=([0-9.]+)")
# The agent each node runs: the real one, with a port range of its own per node.
AGENT = (
    '/bin/sh -c \'exec "$0" agent --workspace {repo} '
    '--port-range $((21000 + SLURM_NODEID * 100))-$((21099 + SLURM_NODEID * 100)) "$@"\' '
    "{strata}"
)


class Server:
    def __init__(self, url: str, http: httpx.Client, prefix: str, cluster: SlurmCluster) -> None:
        self.url, self.http, self.prefix, self.cluster = url, http, prefix, cluster

    def job(self, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self.http.get(f"/jobs/{job_id}").json()
        return job

    def wait_for(self, job_id: int, what: str, check: Any, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if check(job):
                return job
            if time.monotonic() > deadline or job["status"] in ("failed", "cancelled"):
                events = self.http.get(f"/jobs/{job_id}/events").json()
                raise AssertionError(
                    f"job {job_id} not {what}: {job['status']} ({job['reason']}), tasks "
                    f"{[(t['name'], t['status'], t['host']) for t in job['tasks']]}\n"
                    f"events: {[e['message'] for e in events]}\n"
                    f"{self.cluster.diagnostics()}"
                )
            time.sleep(0.5)

    def logs(self, job_id: int, task: str) -> list[str]:
        page = self.http.get(f"/jobs/{job_id}/tasks/{task}/logs", params={"limit": 10000})
        lines: list[str] = page.json()["lines"]
        return lines


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("slurm-e2e") / "data"
    data.mkdir()
    admin = secrets.token_hex(16)
    prefix = f"e2e{secrets.token_hex(3)}"
    with slurm_cluster() as cluster:
        env = {
            "STRATA_API_TOKEN": admin,
            "STRATA_AGENT_TOKEN": secrets.token_hex(16),
            "STRATA_SLURM_ENABLED": "1",
            "STRATA_SLURM_CONF": str(cluster.conf),
            "STRATA_SLURM_ACCOUNTING": "completion",
            "STRATA_SLURM_JOB_PREFIX": prefix,
            "STRATA_SLURM_POLL_SECONDS": "1",
            "STRATA_SLURM_WORKDIR": str(REPO),
            "STRATA_SLURM_OUTPUT_DIR": str(cluster.root / "log"),
            "STRATA_SLURM_AGENT_COMMAND": AGENT.format(
                repo=REPO, strata=Path(sys.executable).parent / "strata"
            ),
        }
        with (
            strata_server(data, env) as url,
            httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30
            ) as http,
        ):
            yield Server(url, http, prefix, cluster)


def test_a_parameter_server_job_runs_as_one_slurm_job_across_both_nodes(server: Server) -> None:
    spec = yaml.safe_load((REPO / "examples" / "digits_ps.yaml").read_text())
    spec["slurm"] = {"partition": "debug", "time_limit": "10:00"}
    answer = server.http.post("/jobs", json=spec)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    running = server.wait_for(job_id, "running", lambda j: j["status"] == "running")
    slurm_id = running["slurm_job_id"]
    assert server.cluster.job_state(slurm_id) == "RUNNING"  # squeue shows it while it runs
    hosts = {t["name"]: t["host"] for t in running["tasks"]}
    nodes = {f"{server.prefix}-{job_id}-n1", f"{server.prefix}-{job_id}-n2"}
    assert set(hosts.values()) == nodes, hosts
    assert hosts["worker:0"] != hosts["worker:1"]  # one GPU per node: a worker on each
    done = server.wait_for(job_id, "succeeded", lambda j: j["status"] == "succeeded")
    curve = [
        float(m[2]) for line in server.logs(job_id, "chief:0") if (m := EPOCH_LINE.search(line))
    ]
    assert len(curve) >= 2 and curve[-1] < curve[0], curve
    assert done["slurm_job_id"] == slurm_id
    # The allocation ends with the job: nothing of it is left.
    assert server.cluster.wait_gone_or_ended(slurm_id, timeout=60) in (
        None,
        "CANCELLED",
        "COMPLETED",
    )
    wait_no_processes(job_id, server=server.url)
