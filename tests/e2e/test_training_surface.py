"""The seeds' TensorFlow surface on real processes: `steps_per_execution` under every strategy,
validation inside `fit` and `model.evaluate` after it (also under parameter servers), and a
parameter-server chief whose checkpoints leave no retracing warnings in its log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_checkpoints import series
from tests.e2e.test_jobs import example
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

SPECS = {
    "mirrored": ("digits_mirrored.yaml", "chief:0"),
    "multi_worker_mirrored": ("digits_mwm.yaml", "worker:0"),
    "parameter_server": ("digits_ps.yaml", "chief:0"),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("surface") / "data") as running:
        yield running


def digits(strategy: str, name: str, *args: str, **overrides: Any) -> dict[str, Any]:
    """The strategy's example spec, running examples/digits.py with these arguments."""
    file, _ = SPECS[strategy]
    spec = example(file, name=name, **overrides)
    spec["entrypoint"] = ["python", "examples/digits.py", *args]
    spec["restart"] = {"policy": "never"}  # one run: its steps are what the test counts
    return spec


def steps_of(cluster: Cluster, job_id: int, task: str, name: str) -> list[int]:
    found = series(cluster, job_id, task, name)
    return [int(step) for step in found["steps"]] if found is not None else []


def saved_checkpoints(cluster: Cluster, job_id: int) -> list[dict[str, Any]]:
    """Every checkpoint the job wrote, retention's deleted ones too; not the export."""
    listed = cluster.http.get(f"/jobs/{job_id}/checkpoints", params={"include_deleted": True})
    return [c for c in listed.json() if c["trigger"] != "export"]


@pytest.mark.parametrize("strategy", list(SPECS))
def test_steps_per_execution_validation_and_evaluate(cluster: Cluster, strategy: str) -> None:
    """Chunks of 4 steps: the loss is streamed at each epoch's last step, batch points at chunk
    ends, val_* at the epochs' ends and eval/* (the evaluate after fit) at the last step; the
    checkpoints' steps, read back from their files, agree."""
    epochs, steps, chunk = 3, 12, 4
    spec = digits(
        strategy,
        f"spe-{strategy.replace('_', '-')}",
        *("--epochs", str(epochs), "--steps-per-epoch", str(steps)),
        *("--steps-per-execution", str(chunk)),
        *("--validation-steps", "3", "--evaluate-steps", "3"),
    )
    job = cluster.submit(spec)
    job_id = job["id"]
    cluster.wait_status(job_id, "succeeded", timeout=300)
    wait_no_processes(job_id, server=cluster.url)  # the last points are flushed as the chief exits
    _, reporter = SPECS[strategy]
    ends = [steps * (epoch + 1) for epoch in range(epochs)]
    for name in ("loss", "accuracy", "val_loss", "val_accuracy", "epoch"):
        assert steps_of(cluster, job_id, reporter, name) == ends, name
    loss = series(cluster, job_id, reporter, "loss")
    assert loss is not None and loss["values"][-1] < loss["values"][0], loss
    batches = steps_of(cluster, job_id, reporter, "batch/loss")
    assert batches and all(step % chunk == 0 and step <= ends[-1] for step in batches), batches
    # Validation inside fit (eval/* at each epoch's end), then the evaluate after it, at the
    # last step again: the weights it evaluated are the trained ones.
    evaluated = steps_of(cluster, job_id, reporter, "eval/loss")
    assert evaluated == [*ends, ends[-1]], evaluated
    assert any("strata-example: evaluated loss=" in line for line in cluster.logs(job_id, reporter))
    assert sorted(c["step"] for c in saved_checkpoints(cluster, job_id)) == ends


def test_parameter_server_chief_saves_twenty_checkpoints_without_retracing(
    cluster: Cluster,
) -> None:
    """Every save under parameter servers once traced a new tf.function, and from the fifth on
    TensorFlow logged "triggered tf.function retracing" into the chief's log. Checkpoints and
    backups at every one of 20 short epochs: not one such line."""
    epochs = 20
    spec = digits(
        "parameter_server",
        "quiet-saves",
        *("--epochs", str(epochs), "--steps-per-epoch", "2"),
        checkpoint={"every_epochs": 1, "keep": 3, "backup_every_seconds": 0},
    )
    job = cluster.submit(spec)
    job_id = job["id"]
    cluster.wait_status(job_id, "succeeded", timeout=300)
    wait_no_processes(job_id, server=cluster.url)
    saved = saved_checkpoints(cluster, job_id)
    assert len(saved) >= epochs, [c["name"] for c in saved]
    chief = cluster.logs(job_id, "chief:0")
    assert any(line.startswith(f"epoch={epochs} ") for line in chief), chief[-20:]
    retracing = [line for line in chief if "retracing" in line]
    assert not retracing, retracing
