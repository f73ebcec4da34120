"""Usage, end to end: an agent of `strata up` (simulated GPUs) samples a real task's process
tree, and the server shows it in the job's tasks and the cluster view, beside /metrics' counts;
the simulated GPUs report nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

MIB = 1 << 20
# The main process holds 80 MiB; a child in a session of its own holds 40 MiB and spins.
TREE = (
    "import subprocess, sys, time\n"
    "held = bytearray(80 << 20)\n"
    "code = 'held = bytearray(40 << 20)\\nwhile True: pass'\n"
    "subprocess.Popen([sys.executable, '-c', code], start_new_session=True)\n"
    "time.sleep(600)\n"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("usage") / "data", agents=1) as running:
        yield running


def sampled_twice(job: dict[str, Any]) -> bool:
    stats = job["tasks"][0]["stats"]
    return stats is not None and stats["cpu_percent"] is not None


def test_a_task_on_a_simulated_host_reports_cpu_and_rss(cluster: Cluster) -> None:
    job = cluster.submit(
        {
            "name": "usage",
            "strategy": "mirrored",
            "entrypoint": ["python", "-c", TREE],
            "replicas": {"chief": {"count": 1, "gpus": 1}},
            "restart": {"policy": "never"},
        }
    )
    try:
        running = cluster.wait_for(job["id"], sampled_twice, 60, "sampled twice")
        stats = running["tasks"][0]["stats"]
        assert stats["attempt"] == 0
        assert stats["rss_bytes"] >= 120 * MIB  # both processes of the tree
        assert stats["cpu_seconds"] > 0
        assert stats["cpu_percent"] > 0  # the child spins

        (host,) = cluster.http.get("/hosts").json()
        assert host["devices"] and all(d["simulated"] for d in host["devices"])
        assert [d["stats"] for d in host["devices"]] == [None] * len(host["devices"])
        (entry,) = cluster.http.get("/cluster").json()["hosts"]
        (ref,) = entry["tasks"]
        assert ref["stats"]["rss_bytes"] >= 120 * MIB

        text = cluster.http.get("/metrics").text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("strata_tasks", (("role", "chief"), ("status", "running")))] == 1
        assert samples[("strata_gpus_allocated", ())] == 1
    finally:
        cluster.http.post(f"/jobs/{job['id']}/cancel")
    cluster.wait_status(job["id"], "cancelled", timeout=60)
    wait_no_processes(job["id"], server=cluster.url)
