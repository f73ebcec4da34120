"""Project quotas end to end: `strata up` with two agents of two simulated GPUs each (four
GPUs), two projects with a quota of 2 GPUs each. A third job of one project waits with the
quota's reason while the other project's job, submitted after it, runs; it starts once one of
its project's jobs ends. Real server, agents and task processes (tiny Python programs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

# Runs until the file named by its argument exists, then succeeds.
UNTIL = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.2)\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("quotas") / "data"
    with local_cluster(data, agents=2, gpus_per_agent=2) as running:
        yield running


def job(project: str, name: str, release: Path) -> dict[str, Any]:
    return {
        "name": name,
        "project": project,
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", UNTIL, str(release)],
        "replicas": {"chief": {"count": 1, "gpus": 1}},
        "restart": {"policy": "never"},
    }


def test_a_job_over_its_projects_quota_waits_while_another_projects_job_runs(
    cluster: Cluster, tmp_path: Path
) -> None:
    for project in ("vision", "nlp"):
        made = cluster.http.post("/projects", json={"name": project})
        assert made.status_code == 201, made.text
        quota = cluster.http.put(f"/projects/{project}/quota", json={"max_gpus": 2})
        assert quota.status_code == 200, quota.text
        assert quota.json() == {
            "project": project,
            "max_gpus": 2,
            "max_priority": None,
            "may_preempt_other_projects": True,
        }

    first, second, third = (
        cluster.submit(job("vision", f"vision-{i}", tmp_path / f"vision-{i}")) for i in range(3)
    )
    for started in (first, second):
        cluster.wait_status(started["id"], "running", timeout=120)
    other = cluster.submit(job("nlp", "nlp-0", tmp_path / "nlp-0"))  # queued behind the third
    try:
        cluster.wait_status(other["id"], "running", timeout=120)
        waiting = cluster.job(third["id"])
        assert waiting["status"] == "pending"
        assert waiting["reason"] == "project vision uses 2 of its 2 GPUs; this job needs 1"

        (tmp_path / "vision-0").touch()  # the first vision job ends
        cluster.wait_status(first["id"], "succeeded", timeout=60)
        cluster.wait_status(third["id"], "running", timeout=60)

        audit = cluster.http.get("/audit", params={"action": "quota.set"}).json()["items"]
        assert [(e["project"], e["detail"]["max_gpus"]) for e in audit] == [
            ("nlp", 2),
            ("vision", 2),
        ]
    finally:
        for name in ("vision-1", "vision-2", "nlp-0"):
            (tmp_path / name).touch()
    for ended in (second, third, other):
        cluster.wait_status(ended["id"], "succeeded", timeout=60)
        wait_no_processes(ended["id"], server=cluster.url)
