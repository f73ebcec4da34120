"""The server crashes mid-training: training goes on, and nothing of the gap is lost or doubled."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import split_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=")
EPOCHS = 50
# Long enough training that it still runs when the restarted server is back, however slowly
# it starts: a task that ends while the server is down flushes its last points into nothing
# (the runtime's exit flush is bounded). 25 epochs ended during the gap once tasks trained at
# by-hand speed.
STEPS_PER_EPOCH = 60


def test_training_survives_a_server_crash(tmp_path: Path) -> None:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_ps.yaml").read_text())
    spec["entrypoint"] = [
        "python",
        "examples/digits.py",
        "--epochs",
        str(EPOCHS),
        "--steps-per-epoch",
        str(STEPS_PER_EPOCH),
    ]
    with split_cluster(tmp_path / "data") as cluster:
        job = cluster.submit(spec)
        cluster.wait_for(
            job["id"],
            lambda j: any("epoch=3 " in line for line in cluster.logs(j["id"], "chief:0")),
            180,
            "at epoch 3",
        )
        cluster.kill_server()
        killed_at = time.time()
        time.sleep(4)
        cluster.start_server()
        restarted_at = time.time()
        done = cluster.wait_status(job["id"], "succeeded", timeout=300)
        epochs = [
            int(m[1])
            for line in cluster.logs(job["id"], "chief:0")
            if (m := EPOCH_LINE.match(line))
        ]
        assert epochs == list(range(1, EPOCHS + 1)), epochs  # every line once, in order
        assert all(t["attempt"] == 0 for t in done["tasks"])  # nothing was restarted
        events = cluster.events(job["id"])
        assert not [e for e in events if e["data"].get("to") in ("lost", "failed")]
        # Metrics of the gap arrived after the restart: one loss point per epoch, none twice,
        # and some observed while the server was down (training went on without it).
        metrics = cluster.http.get(
            f"/jobs/{job['id']}/metrics", params={"names": "loss", "task": "chief:0"}
        ).json()
        (loss,) = metrics["series"]
        assert loss["total_points"] == EPOCHS
        assert loss["steps"] == sorted(set(loss["steps"]))
        assert any(killed_at < t < restarted_at for t in loss["wall_times"]), (
            killed_at,
            restarted_at,
            loss["wall_times"],
        )
        wait_no_processes(job["id"], server=cluster.url)
