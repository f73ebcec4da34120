"""Checkpoints, checkpoint-now and the sidecar evaluator on real TensorFlow processes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("checkpoints") / "data") as running:
        yield running


def ps_spec(name: str, epochs: int, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_ps.yaml").read_text())
    spec["name"] = name
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", str(epochs)]
    spec.update(extra)
    return spec


def task(job: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(t for t in job["tasks"] if t["name"] == name)
    return found


def series(cluster: Cluster, job_id: int, task_name: str, name: str) -> dict[str, Any] | None:
    answer = cluster.http.get(
        f"/jobs/{job_id}/metrics", params={"names": name, "task": task_name}
    ).json()
    return next(iter(answer["series"]), None)


def test_checkpoint_now_and_the_sidecar_evaluator(cluster: Cluster) -> None:
    # Long enough to outlast the evaluator's start and stop; it is cancelled at the end.
    spec = ps_spec("ckpt-now", 400, checkpoint={"every_epochs": 10, "keep": 3})
    job = cluster.submit(spec)
    job_id = job["id"]
    cluster.wait_for(
        job_id,
        lambda j: any(line.startswith("epoch=1 ") for line in cluster.logs(j["id"], "chief:0")),
        180,
        "past its first epoch",
    )

    # Checkpoint now: the chief writes it at its next step and the answer says when.
    answer = cluster.http.post(f"/jobs/{job_id}/checkpoint", timeout=60)
    assert answer.status_code == 200, answer.text
    now = answer.json()
    checkpoint = now["checkpoint"]
    assert now["task"] == "chief:0" and checkpoint["trigger"] == "command"
    assert now["seconds"] < 5, now
    assert checkpoint["step"] > 0 and checkpoint["size_bytes"] > 0
    assert Path(checkpoint["path"] + ".index").is_file()
    listed = cluster.http.get(f"/jobs/{job_id}/checkpoints").json()
    assert checkpoint["name"] in [c["name"] for c in listed]

    # The sidecar evaluator: placed outside the training cluster, it evaluates checkpoints
    # and reports eval/* at each checkpoint's step.
    started = cluster.http.post(f"/jobs/{job_id}/evaluator", json={"action": "start"})
    assert started.status_code == 200, started.text
    assert task(started.json(), "evaluator:0")["status"] == "scheduled"
    evaluated = cluster.wait_for(
        job_id,
        lambda _: (
            (s := series(cluster, job_id, "evaluator:0", "eval/loss")) is not None
            and len(s["steps"]) >= 1
        ),
        180,
        "evaluated by the sidecar",
    )
    evaluator = task(evaluated, "evaluator:0")
    assert evaluator["status"] == "running" and evaluator["pid"]
    placed = next(
        e for e in cluster.events(job_id) if e["kind"] == "evaluator" and e["task"] == "evaluator:0"
    )
    assert "started on" in placed["message"]
    loss = series(cluster, job_id, "evaluator:0", "eval/loss")
    assert loss is not None

    def checkpoint_steps() -> set[int]:
        return {
            c["step"]
            for c in cluster.http.get(
                f"/jobs/{job_id}/checkpoints", params={"include_deleted": True}
            ).json()
        }

    # The evaluator may read a checkpoint's files before the chief's report of it arrives.
    cluster.wait_for(
        job_id,
        lambda _: set(loss["steps"]) <= checkpoint_steps(),
        30,
        f"with a checkpoint at every evaluated step {loss['steps']}",
    )
    assert all(0 < value < 5 for value in loss["values"])

    stopped = cluster.http.post(f"/jobs/{job_id}/evaluator", json={"action": "stop"})
    assert stopped.status_code == 200
    assert task(stopped.json(), "evaluator:0")["status"] == "stopped"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{evaluator['pid']}").exists():
        time.sleep(0.2)
    assert not Path(f"/proc/{evaluator['pid']}").exists(), "the evaluator process lives on"
    assert cluster.job(job_id)["status"] == "running"  # training was not disturbed

    cluster.http.post(f"/jobs/{job_id}/cancel")
    refused = cluster.http.post(f"/jobs/{job_id}/checkpoint")
    assert refused.status_code == 409 and "is cancelled" in refused.json()["detail"]
    wait_no_processes(job_id, server=cluster.url)


def test_a_spec_with_an_evaluator_starts_it_with_the_job(cluster: Cluster) -> None:
    # Only the final save: the evaluator is stopped right after the chief writes it.
    spec = ps_spec("with-evaluator", 6, checkpoint={"every_epochs": 100, "keep": 3})
    spec["replicas"]["evaluator"] = {"count": 1}
    job = cluster.submit(spec)
    cluster.wait_status(job["id"], "succeeded", timeout=300)
    cluster.wait_for(  # the job's end stops it
        job["id"],
        lambda j: task(j, "evaluator:0")["status"] == "stopped",
        30,
        "with its evaluator stopped",
    )
    # The evaluator's last points are flushed as it exits.
    wait_no_processes(job["id"], server=cluster.url)
    loss = series(cluster, job["id"], "evaluator:0", "eval/loss")
    assert loss is not None and loss["steps"], "the evaluator reported nothing"
    # Stopped as training ended, it still evaluated the final checkpoint, once.
    listed = cluster.http.get(f"/jobs/{job['id']}/checkpoints").json()
    final = next(c for c in listed if c["trigger"] != "export")  # the example exports too
    assert loss["steps"][-1] == final["step"], (loss["steps"], final)
    assert loss["steps"] == sorted(set(loss["steps"]))
    assert os.path.isdir(cluster.data_dir / "checkpoints" / f"job-{job['id']}")
