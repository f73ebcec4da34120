"""Three server replicas on one PostgreSQL behind HAProxy: the leader dies, another takes
over, and nothing acknowledged is lost and no task of a running job is restarted."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.postgres import create_database
from tests.support.replicas import ReplicaSet, replica_set

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPOCHS = 16
STEPS_PER_EPOCH = 60
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=")


@pytest.fixture
def cluster(tmp_path: Path, postgres_admin_url: str) -> Any:
    url = asyncio.run(create_database(postgres_admin_url, "strata_replicas"))
    with replica_set(tmp_path, url, replicas=3, agents=2) as running:
        yield running


def training(example: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / example).read_text())
    spec["entrypoint"] = [
        "python",
        "examples/digits.py",
        "--epochs",
        str(EPOCHS),
        "--steps-per-epoch",
        str(STEPS_PER_EPOCH),
    ]
    return spec


def sleeper(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", "import time; time.sleep(600)"],
        "replicas": {"chief": {"count": 1, "gpus": 0}},
    }


class Acknowledged:
    """Submissions and cancels sent through the load balancer on a thread of their own,
    with every one the servers acknowledged noted."""

    def __init__(self, cluster: ReplicaSet) -> None:
        self.http = httpx.Client(
            base_url=cluster.url,
            headers={"Authorization": f"Bearer {cluster.admin_token}"},
            timeout=30,
        )
        self.submitted: list[int] = []
        self.cancelled: list[int] = []
        self.refused: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Acknowledged:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.http.close()

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            index += 1
            try:
                answer = self.http.post("/jobs", json=sleeper(f"ack-{index}"))
                if answer.status_code == 201:
                    self.submitted.append(answer.json()["id"])
                else:
                    self.refused.append(answer.text)
                if index % 2 == 0 and self.submitted:
                    job_id = self.submitted[-1]
                    cancel = self.http.post(f"/jobs/{job_id}/cancel")
                    if cancel.status_code == 200:
                        self.cancelled.append(job_id)
                    else:
                        self.refused.append(cancel.text)
            except httpx.HTTPError as exc:  # a connection the dying leader held: not acked
                self.refused.append(repr(exc))
            time.sleep(0.2)


def epochs_logged(cluster: ReplicaSet, job_id: int, task: str) -> list[int]:
    return [int(m[1]) for line in cluster.logs(job_id, task) if (m := EPOCH_LINE.match(line))]


def test_the_leader_dies_and_another_takes_over_losing_nothing(cluster: ReplicaSet) -> None:
    ps = cluster.submit(training("digits_ps.yaml"))
    mwm = cluster.submit(training("digits_mwm.yaml"))
    for job, task in ((ps, "chief:0"), (mwm, "worker:0")):
        cluster.wait_for(
            job["id"],
            lambda j, t=task: len(epochs_logged(cluster, j["id"], t)) >= 2,
            240,
            "at epoch 2",
        )
    old = cluster.wait_leader()
    with Acknowledged(cluster) as acked:
        time.sleep(2)
        old.kill()
        killed = time.monotonic()
        placed = cluster.submit(sleeper("after-the-kill"))
        cluster.wait_status(placed["id"], "running", timeout=60)
        print(f"leader killed → a new job running in {time.monotonic() - killed:.2f} s")
        new = cluster.wait_leader(other_than=old)
        time.sleep(4)
    assert new is not old
    assert acked.submitted, acked.refused

    for job in (ps, mwm):
        done = cluster.wait_status(job["id"], "succeeded", timeout=300)
        # No task of a running job was restarted, nor its host lost.
        assert [t["attempt"] for t in done["tasks"]] == [0] * len(done["tasks"]), done["tasks"]
        assert done["restart_count"] == 0
        lost = [e for e in cluster.events(job["id"]) if e["data"].get("to") in ("lost", "failed")]
        assert not lost, lost
    # Every epoch's log line once, and every metric point: one loss per epoch.
    assert epochs_logged(cluster, ps["id"], "chief:0") == list(range(1, EPOCHS + 1))
    metrics = cluster.http.get(
        f"/jobs/{ps['id']}/metrics", params={"names": "loss", "task": "chief:0"}
    ).json()
    (loss,) = metrics["series"]
    assert loss["total_points"] == EPOCHS
    # Every acknowledged submission is there, and every acknowledged cancel held.
    for job_id in acked.submitted:
        job = cluster.job(job_id)
        if job_id in acked.cancelled:
            assert job["status"] == "cancelled", job
    listed = cluster.http.get("/replicas").json()
    assert listed["leader"] == new.health()["replica"]  # type: ignore[index]
