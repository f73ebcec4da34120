"""Real jobs on a real local cluster: `strata up`, its agents, and TensorFlow processes.

Each test ends by checking the process table: nothing a job started may outlive it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import (
    Cluster,
    job_processes,
    local_cluster,
    stream_frames,
    wait_no_processes,
)
from tests.support.processes import STRATA

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPOCH_LINE = re.compile(r"epoch=(\d+) loss=([0-9.]+)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("e2e") / "data") as running:
        yield running


def example(file: str, /, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / file).read_text())
    spec.update(overrides)
    return spec


def losses(lines: list[str]) -> list[float]:
    return [float(m[2]) for line in lines if (m := EPOCH_LINE.search(line))]


def python_job(name: str, code: str, gpus: int = 0) -> dict[str, Any]:
    """A mirrored job whose one task is a tiny Python program: fast, no TensorFlow."""
    return {
        "name": name,
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", code],
        "replicas": {"chief": {"count": 1, "gpus": gpus}},
        "restart": {"policy": "never"},  # these tests are about single runs
    }


def assert_trained(cluster: Cluster, job: dict[str, Any], deciding_task: str) -> None:
    job_id = job["id"]
    done = cluster.wait_status(job_id, "succeeded")
    curve = losses(cluster.logs(job_id, deciding_task))
    assert len(curve) >= 2, cluster.logs(job_id, deciding_task)[-20:]
    assert curve[-1] < curve[0], f"loss did not fall: {curve}"
    cluster.wait_for(
        job_id,
        lambda j: all(t["status"] in ("succeeded", "stopped") for t in j["tasks"]),
        60,
        "fully stopped",
    )
    wait_no_processes(job_id, server=cluster.url)
    assert all(t["host"] and t["port"] for t in done["tasks"])


def test_parameter_server_job(cluster: Cluster) -> None:
    job = cluster.submit(example("digits_ps.yaml"))
    assert_trained(cluster, job, "chief:0")
    final = cluster.job(job["id"])
    hosts = {t["host"] for t in final["tasks"]}
    assert hosts == {"local-0", "local-1"}  # spread over both agents
    workers = [t for t in final["tasks"] if t["role"] == "worker"]
    assert sorted(len(w["gpus"]) for w in workers) == [1, 1]
    # TF_CONFIG was persisted and names all four training tasks, no evaluator
    detail = cluster.http.get(f"/jobs/{job['id']}").json()
    assert detail["status"] == "succeeded"


def test_multi_worker_mirrored_job(cluster: Cluster) -> None:
    job = cluster.submit(example("digits_mwm.yaml"))
    assert_trained(cluster, job, "worker:0")
    final = cluster.job(job["id"])
    assert [t["status"] for t in final["tasks"]] == ["succeeded", "succeeded"]


def test_mirrored_job(cluster: Cluster) -> None:
    job = cluster.submit(example("digits_mirrored.yaml"))
    assert_trained(cluster, job, "chief:0")


def test_crashing_chief_fails_the_job_and_stops_the_servers(cluster: Cluster) -> None:
    spec = example("digits_ps.yaml", name="digits-crash")
    spec["entrypoint"] = [*spec["entrypoint"], "--fail-at-epoch", "2"]
    spec["restart"] = {"policy": "never"}
    job = cluster.submit(spec)
    failed = cluster.wait_status(job["id"], "failed")
    assert failed["reason"] == "chief:0 exited with code 3"
    chief = next(t for t in failed["tasks"] if t["name"] == "chief:0")
    assert chief["exit_code"] == 3
    ending = next(e for e in cluster.events(job["id"]) if e["to_status"] == "failed")
    assert ending["data"]["exit_code"] == 3
    assert any("epoch=1" in line for line in ending["data"]["log_tail"]), ending["data"]["log_tail"]
    cluster.wait_for(
        job["id"],
        lambda j: all(t["status"] not in ("running", "scheduled") for t in j["tasks"]),
        60,
        "stopped",
    )
    wait_no_processes(job["id"], server=cluster.url)


def test_entrypoint_that_cannot_start(cluster: Cluster) -> None:
    spec = python_job("no-such-dir", "print('never')")
    spec["working_dir"] = "does/not/exist"
    job = cluster.submit(spec)
    failed = cluster.wait_status(job["id"], "failed", timeout=60)
    assert (
        "chief:0 could not start: working_dir 'does/not/exist' does not exist" in failed["reason"]
    )


def test_job_too_big_waits_then_runs_when_an_agent_with_room_joins(cluster: Cluster) -> None:
    job = cluster.submit(python_job("big", "print('ran on the big host')", gpus=3))
    waiting = cluster.wait_for(
        job["id"], lambda j: "needs 3 GPUs" in (j["reason"] or ""), 30, "waiting with a reason"
    )
    assert waiting["status"] == "pending"
    assert waiting["reason"] == "chief:0 needs 3 GPUs on one host; the most free on any host is 2"

    cluster.start_agent("big-host", gpus=4, ports="25000-25099")
    done = cluster.wait_status(job["id"], "succeeded", timeout=60)
    assert done["tasks"][0]["host"] == "big-host"
    assert done["tasks"][0]["gpus"] == [0, 1, 2]
    assert "ran on the big host" in cluster.logs(job["id"], "chief:0")


def test_cancel_stops_every_task(cluster: Cluster) -> None:
    job = cluster.submit(
        python_job("sleeper", "import time; print('up', flush=True); time.sleep(600)")
    )
    cluster.wait_status(job["id"], "running", timeout=60)
    assert job_processes(job["id"], cluster.url)
    cancelled = cluster.http.post(f"/jobs/{job['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    stopped = cluster.wait_for(
        job["id"], lambda j: j["tasks"][0]["status"] == "stopped", 30, "stopped"
    )
    assert stopped["tasks"][0]["exit_code"] == 128 + signal.SIGTERM
    wait_no_processes(job["id"], server=cluster.url)


def test_killed_agent_is_noticed_and_its_tasks_die_with_it(cluster: Cluster) -> None:
    doomed = cluster.start_agent("doomed-host", gpus=8, ports="26000-26099")
    cluster.wait_host("doomed-host", "online")
    # 5 GPUs fit only on the new host; with no restarts the job must fail with it.
    spec = python_job("on-doomed", "import time; time.sleep(600)", gpus=5)
    job = cluster.submit(spec)
    running = cluster.wait_status(job["id"], "running", timeout=60)
    assert running["tasks"][0]["host"] == "doomed-host"
    assert job_processes(job["id"], cluster.url)

    doomed.send_signal(signal.SIGKILL)
    lost = cluster.wait_host("doomed-host", "lost", timeout=15)
    assert lost["heartbeat_age_seconds"] >= 4
    failed = cluster.wait_status(job["id"], "failed", timeout=15)
    assert failed["reason"].startswith("host doomed-host was lost")
    assert failed["tasks"][0]["status"] == "lost"
    # The kernel killed it with its agent.
    wait_no_processes(job["id"], timeout=10, server=cluster.url)


def test_process_check_sees_live_processes(cluster: Cluster) -> None:
    """The process-table check used above is not vacuous: it finds a running task."""
    job = cluster.submit(python_job("visible", "import time; time.sleep(600)"))
    cluster.wait_status(job["id"], "running", timeout=60)
    assert len(job_processes(job["id"], cluster.url)) == 1
    cluster.http.post(f"/jobs/{job['id']}/cancel")
    wait_no_processes(job["id"], server=cluster.url)


def test_submit_follow_streams_logs_and_exits_with_the_outcome(
    cluster: Cluster, tmp_path: Path
) -> None:
    code = (
        "import time\nfor i in range(3):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.3)\n"
    )
    spec = tmp_path / "ticks.yaml"
    spec.write_text(yaml.safe_dump(python_job("ticks", code)))
    env = {**os.environ, "STRATA_SERVER": cluster.url, "STRATA_TOKEN": cluster.admin_token}
    followed = subprocess.run(
        [*STRATA, "submit", str(spec), "--follow"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert followed.returncode == 0, followed.stderr
    lines = [
        line.split(maxsplit=1)[1]
        for line in followed.stdout.splitlines()
        if line.strip().startswith("chief:0 ")
    ]
    assert lines == ["tick 0", "tick 1", "tick 2"]
    job_id = followed.stdout.split()[1]
    assert followed.stdout.rstrip().endswith(f"job {job_id} succeeded: chief:0 exited with code 0")

    logs = subprocess.run(
        [*STRATA, "jobs", "logs", job_id], env=env, capture_output=True, text=True, timeout=60
    )
    assert logs.returncode == 0
    assert [line.split(maxsplit=1)[1] for line in logs.stdout.splitlines()] == lines

    boom = "print('loading', flush=True)\nprint('giving up', flush=True)\nraise SystemExit(5)"
    spec.write_text(yaml.safe_dump(python_job("boom", boom)))
    failed = subprocess.run(
        [*STRATA, "submit", str(spec), "-f"], env=env, capture_output=True, text=True, timeout=120
    )
    assert failed.returncode == 1, failed.stderr
    failed_id = failed.stdout.split()[1]
    # It ends with the failing task's last lines and the reason, after whatever came before.
    ending = [
        "last lines of chief:0:",
        "chief:0 loading",
        "chief:0 giving up",
        f"job {failed_id} failed: chief:0 exited with code 5",
    ]
    assert [line.strip() for line in failed.stdout.splitlines()[-4:]] == ending, failed.stdout

    relogged = subprocess.run(
        [*STRATA, "jobs", "logs", failed_id, "-f"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert relogged.returncode == 1, relogged.stderr
    assert [line.strip() for line in relogged.stdout.splitlines()[-4:]] == ending


def _succeeded(frame: dict[str, Any]) -> bool:
    return bool(frame["type"] == "event" and frame["event"]["to_status"] == "succeeded")


def _points(frames: list[dict[str, Any]]) -> set[tuple[str, str, int]]:
    return {
        (f["task"], name, int(step))
        for f in frames
        if f["type"] == "metrics"
        for name, (steps, _values, _times) in f["series"].items()
        for step in steps
    }


def _lines(frames: list[dict[str, Any]]) -> dict[str, list[str]]:
    by_task: dict[str, list[str]] = {}
    for f in frames:
        if f["type"] == "log":
            by_task.setdefault(f["task"], []).extend(f["lines"])
    return by_task


def test_ps_metrics_and_logs_stream_live_then_replay_as_history(cluster: Cluster) -> None:
    spec = example("digits_ps.yaml", name="digits-streamed")
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", "8"]
    job = cluster.submit(spec)
    live = stream_frames(cluster, job["id"], stop=_succeeded)
    end = next(i for i, f in enumerate(live) if _succeeded(f))
    during = live[:end]

    names = {name for _task, name, _step in _points(during)}
    assert {"loss", "accuracy", "epoch", "lr", "steps_per_sec", "batch/loss"} <= names, names
    assert any(n.startswith("coordinator/") for n in names), names
    epochs = sorted(s for t, n, s in _points(during) if (t, n) == ("chief:0", "loss"))
    assert len(epochs) == 8 and epochs == sorted(set(epochs))  # one loss point per epoch
    curve = [
        value
        for f in during
        if f["type"] == "metrics" and f["task"] == "chief:0" and "loss" in f["series"]
        for value in f["series"]["loss"][1]
    ]
    assert curve[-1] < curve[0]
    # Metrics came while training ran, not only at the end.
    first_loss = next(f for f in during if f["type"] == "metrics" and "loss" in f["series"])
    assert first_loss["received_at"] < live[end]["received_at"] - 1.0
    lines = _lines(live)
    assert set(lines) == {"chief:0", "worker:0", "worker:1", "ps:0"}
    assert any(line.startswith("epoch=8 ") for line in lines["chief:0"])
    assert any("serving ps:0" in line for line in lines["ps:0"])

    cluster.wait_for(
        job["id"],
        lambda j: all(t["status"] in ("succeeded", "stopped") for t in j["tasks"]),
        60,
        "fully stopped",
    )
    replay = stream_frames(cluster, job["id"], stop=lambda f: f["type"] == "history_end")
    assert _points(replay) >= _points(live)  # the late client sees everything the live one did
    assert {t: ls[: len(lines[t])] for t, ls in _lines(replay).items()} == lines


def test_custom_training_loop_reports_through_the_runtime(cluster: Cluster) -> None:
    job = cluster.submit(example("custom_loop_ps.yaml"))
    cluster.wait_status(job["id"], "succeeded")
    series = {
        s["name"]: s
        for s in cluster.http.get(f"/jobs/{job['id']}/metrics", params={"task": "chief:0"}).json()[
            "series"
        ]
    }
    assert {"loss", "epoch_loss", "steps_per_sec"} <= set(series), set(series)
    assert series["epoch_loss"]["values"][-1] < series["epoch_loss"]["values"][0]
    wait_no_processes(job["id"], server=cluster.url)
