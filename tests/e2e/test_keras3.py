"""Keras 3 scripts under Strata, as real processes: a mirrored job streams, checkpoints, resumes
from its backup after a SIGKILL and is evaluated by its sidecar; under multi_worker_mirrored the
job fails within its first attempt with a reason that says why and what to use instead."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=([0-9.]+)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("keras3") / "data") as running:
        yield running


def keras3_spec(name: str, *args: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "keras3_mirrored.yaml").read_text())
    spec["name"] = name
    spec["entrypoint"] = ["python", "examples/keras3_mirrored.py", *args]
    return spec


def epochs(cluster: Cluster, job_id: int, attempt: int) -> list[tuple[int, float]]:
    page = cluster.http.get(
        f"/jobs/{job_id}/tasks/chief:0/logs", params={"attempt": attempt, "limit": 10000}
    ).json()
    return [(int(m[1]), float(m[2])) for line in page["lines"] if (m := EPOCH_LINE.match(line))]


def series(cluster: Cluster, job_id: int, task: str, name: str) -> dict[str, Any] | None:
    answer = cluster.http.get(
        f"/jobs/{job_id}/metrics", params={"names": name, "task": task}
    ).json()
    return next(iter(answer["series"]), None)


def test_a_keras3_mirrored_job_streams_checkpoints_and_resumes_after_a_kill(
    cluster: Cluster,
) -> None:
    spec = keras3_spec(
        "keras3-resume", "--epochs", "10", "--steps-per-execution", "4", "--epoch-seconds", "1"
    )
    spec["checkpoint"] |= {"backup_every_seconds": 0}  # a backup at every epoch end
    spec["restart"] = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0}
    job = cluster.submit(spec)
    cluster.wait_for(
        job["id"], lambda j: len(epochs(cluster, j["id"], 0)) >= 4, 240, "past epoch 4"
    )
    chief = next(t for t in cluster.job(job["id"])["tasks"] if t["name"] == "chief:0")
    os.kill(int(chief["pid"]), signal.SIGKILL)
    done = cluster.wait_status(job["id"], "succeeded", timeout=300)

    attempt = next(t["attempt"] for t in done["tasks"] if t["name"] == "chief:0")
    assert attempt == 1 and done["restart_count"] == 1
    before, after = epochs(cluster, job["id"], 0), epochs(cluster, job["id"], 1)
    # Keras 3's BackupAndRestore brought back the epoch and the weights.
    assert 1 < after[0][0] <= before[-1][0] + 1, (before, after)
    assert after[-1][0] == 10
    assert after[0][1] < 0.6 * before[0][1], (before, after)

    loss = series(cluster, job["id"], "chief:0", "loss")
    assert loss is not None and loss["steps"][-1] == 10 * 20  # 20 steps an epoch
    checkpoints = cluster.http.get(f"/jobs/{job['id']}/checkpoints").json()
    assert checkpoints and checkpoints[0]["step"] == 200, checkpoints
    # Each says what it is: a TF checkpoint written by Keras 3.
    assert {(c["format"], c["keras"]) for c in checkpoints} == {("tf_checkpoint", "keras3")}

    cluster.wait_for(
        job["id"],
        lambda j: next(t for t in j["tasks"] if t["name"] == "evaluator:0")["status"] == "stopped",
        60,
        "with its evaluator stopped",
    )
    wait_no_processes(job["id"], server=cluster.url)
    evaluated = series(cluster, job["id"], "evaluator:0", "eval/loss")
    assert evaluated is not None and evaluated["steps"], "the sidecar evaluator reported nothing"
    assert evaluated["steps"][-1] == 200  # it evaluated the final checkpoint
    assert all(0 < value < 5 for value in evaluated["values"])


def test_a_keras3_multi_worker_job_fails_at_once_saying_why(cluster: Cluster) -> None:
    spec = keras3_spec("keras3-mwm", "--epochs", "3")
    spec["strategy"] = "multi_worker_mirrored"
    spec["replicas"] = {"worker": {"count": 2}}
    spec["restart"] = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0}
    job = cluster.submit(spec)
    done = cluster.wait_status(job["id"], "failed", timeout=240)

    assert done["restart_count"] == 0, done["reason"]
    assert {t["attempt"] for t in done["tasks"]} == {0}
    reason = done["reason"]
    assert "Keras 3" in reason and "multi_worker_mirrored" in reason, reason
    assert "import tf_keras as keras" in reason, reason
    wait_no_processes(job["id"], server=cluster.url)
