"""The export of the trained model and the warm start from another job's checkpoint, on real
TensorFlow processes: exports under every strategy load and predict in a fresh process, and a
parameter-server job starts from what a mirrored job learned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_jobs import example, losses
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
STEPS = "10"  # steps per epoch: these jobs only need to learn a little


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with local_cluster(tmp_path_factory.mktemp("export") / "data") as running:
        yield running


def digits(file: str, name: str, epochs: int, **overrides: Any) -> dict[str, Any]:
    entrypoint = ["python", "examples/digits.py", "--epochs", str(epochs)]
    fields: dict[str, Any] = {"name": name, "entrypoint": [*entrypoint, "--steps-per-epoch", STEPS]}
    return example(file, **{**fields, **overrides})


def run(cluster: Cluster, spec: dict[str, Any]) -> dict[str, Any]:
    job = cluster.submit(spec)
    done = cluster.wait_for(
        job["id"], lambda j: j["status"] in ("succeeded", "failed", "cancelled"), 280, "done"
    )
    assert done["status"] == "succeeded", (done["reason"], cluster.events(job["id"])[-10:])
    wait_no_processes(job["id"], server=cluster.url)
    return done


def exports(cluster: Cluster, job_id: int) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = cluster.http.get(f"/jobs/{job_id}/checkpoints").json()
    return [c for c in listed if c["trigger"] == "export"]


# Loads an export in a process that never trained and predicts on the held-out digits.
PREDICT = """
import sys
import numpy as np
path, how = sys.argv[1], sys.argv[2]
features = np.random.default_rng(0).random((5, 64), dtype=np.float32)
if how == "saved_model":
    import tensorflow as tf
    serve = tf.saved_model.load(path).signatures["serving_default"]
    [name] = serve.structured_input_signature[1]
    predictions = next(iter(serve(**{name: tf.constant(features)}).values())).numpy()
    import tf_keras
    again = tf_keras.models.load_model(path).predict(features, verbose=0)
    assert np.allclose(again, predictions, atol=1e-5), (again, predictions)
else:
    import tf_keras
    predictions = tf_keras.models.load_model(path).predict(features, verbose=0)
print("PREDICTED", predictions.shape, bool(np.isfinite(predictions).all()), flush=True)
"""


def assert_predicts(path: str, how: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PREDICT, path, how],
        cwd=REPO,
        env={"TF_USE_LEGACY_KERAS": "1", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("PREDICTED")]
    assert lines == ["PREDICTED (5, 10) True"], result.stderr[-3000:]


@pytest.fixture(scope="module")
def mirrored_job(cluster: Cluster) -> dict[str, Any]:
    """A mirrored job trained long enough to have learned, exported as a .keras file."""
    return run(
        cluster,
        digits(
            "digits_mirrored.yaml",
            "export-mirrored",
            8,
            export={"dir": "model", "format": "keras"},
            checkpoint={"every_epochs": 2, "keep": 2},
        ),
    )


def test_a_mirrored_job_exports_a_keras_file_that_loads_elsewhere(
    cluster: Cluster, mirrored_job: dict[str, Any]
) -> None:
    [exported] = exports(cluster, mirrored_job["id"])
    assert (exported["name"], exported["format"], exported["keras"]) == (
        "model.keras",
        "keras",
        "tf_keras",
    )
    assert exported["step"] == 80 and exported["epoch"] == 8
    assert Path(exported["path"]).is_file() and exported["size_bytes"] > 0
    # Retention kept 2 checkpoints; the export is not one of them and stays.
    listed = cluster.http.get(
        f"/jobs/{mirrored_job['id']}/checkpoints", params={"include_deleted": True}
    ).json()
    assert [c["name"] for c in listed if c["deleted_at"]] == ["ckpt-2", "ckpt-1"]
    assert {c["format"] for c in listed if c["trigger"] != "export"} == {"tf_checkpoint"}
    assert_predicts(exported["path"], "keras")


def test_a_multi_worker_mirrored_job_exports_from_the_chief_only(cluster: Cluster) -> None:
    job = run(
        cluster,
        digits(
            "digits_mwm.yaml",
            "export-mwm",
            2,
            export={},
            strategy_options={"communication": "ring"},
        ),
    )
    [exported] = exports(cluster, job["id"])
    assert (exported["name"], exported["format"]) == ("export", "saved_model")
    directory = Path(exported["path"])
    assert (directory / "saved_model.pb").is_file()
    # The other worker took part with a copy of its own, and deleted it.
    assert sorted(p.name for p in directory.parent.iterdir() if "temp" in p.name) == []
    assert_predicts(exported["path"], "saved_model")


def test_a_parameter_server_job_warm_starts_from_a_mirrored_checkpoint_and_exports(
    cluster: Cluster, mirrored_job: dict[str, Any]
) -> None:
    source = mirrored_job["id"]
    cold = losses(cluster.logs(source, "chief:0"))
    assert len(cold) == 8 and cold[-1] < cold[0] / 2, cold
    checkpoint_dir = Path(exports(cluster, source)[0]["path"]).parent

    spec = digits(
        "digits_ps.yaml",
        "warm-ps",
        2,
        checkpoint={"every_epochs": 1, "warm_start_from": str(checkpoint_dir)},
    )
    assert "export" in spec  # the example exports
    job = run(cluster, spec)
    log = cluster.logs(job["id"], "chief:0")
    latest = checkpoint_dir / "ckpt-4"  # the mirrored job's 8th epoch (every 2 epochs)
    assert f"strata: warm-started the model from {latest}" in log, log[-30:]
    warm = losses(log)
    # The first epoch starts where the mirrored job ended, far below a cold start's.
    assert warm[0] < cold[0] / 2, (warm, cold)

    [exported] = exports(cluster, job["id"])
    assert (exported["format"], exported["keras"], exported["epoch"]) == (
        "saved_model",
        "tf_keras",
        2,
    )
    # The optimizer's state came with the weights: its step goes on from the mirrored job's.
    assert exported["step"] >= 80 + 20, exported
    assert_predicts(exported["path"], "saved_model")


def test_a_warm_start_from_nothing_fails_the_job_at_once_with_the_reason(
    cluster: Cluster,
) -> None:
    missing = "/nonexistent/strata-e2e/ckpt-1"
    spec = digits(
        "digits_mirrored.yaml",
        "warm-missing",
        2,
        checkpoint={"warm_start_from": missing},
        restart={"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0},
    )
    job = cluster.submit(spec)
    failed = cluster.wait_status(job["id"], "failed", timeout=180)
    assert f"cannot warm-start from checkpoint.warm_start_from={missing}" in failed["reason"]
    assert [t["attempt"] for t in failed["tasks"]] == [0]  # not retried
    wait_no_processes(job["id"], server=cluster.url)
