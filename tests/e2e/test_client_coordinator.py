"""A job whose coordinator is the client: a real Jupyter kernel (the example notebook,
executed by nbclient) coordinates its workers and ps, a new kernel resumes, a client killed
mid-fit leaves the servers serving until the job's client_idle_timeout ends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "examples" / "digits_client.ipynb"
LOST_SECONDS = 8
IDLE_SECONDS = 20  # a killed client's job ends this long after it is found gone


def servers_spec(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "strategy": "parameter_server",
        "coordinator": "client",
        "replicas": {"worker": {"count": 2}, "ps": {"count": 1}},
        **extra,
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        # A killed client is found gone in seconds (the default is 30).
        patch.setenv("STRATA_CLIENT_HEARTBEAT_SECONDS", "1")
        patch.setenv("STRATA_CLIENT_LOST_SECONDS", str(LOST_SECONDS))
        with local_cluster(tmp_path_factory.mktemp("client") / "data") as running:
            yield running


def client_env(cluster: Cluster, job_id: int, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "STRATA_SERVER": cluster.url,
        "STRATA_TOKEN": cluster.admin_token,
        "STRATA_JOB": str(job_id),
        "PYTHONPATH": str(REPO),
        **extra,
    }


def run_notebook(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The notebook executed in a new kernel (shut down after): its printed output."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the kernel inherits this process's environment
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    return "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def attempts(job: dict[str, Any]) -> dict[str, tuple[int, str]]:
    return {task["name"]: (task["attempt"], task["status"]) for task in job["tasks"]}


def test_a_notebook_kernel_coordinates_and_a_new_kernel_resumes(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = cluster.submit(servers_spec("from-a-notebook"))["id"]
    servers = attempts(cluster.wait_status(job_id, "running"))
    assert servers == {name: (0, "running") for name in ("worker:0", "worker:1", "ps:0")}

    first = run_notebook(client_env(cluster, job_id, DIGITS_EPOCHS="3"), monkeypatch)
    assert "epochs run: [1, 2, 3]" in first, first
    assert "metrics stored: True" in first, first
    stored = cluster.http.get(
        f"/jobs/{job_id}/metrics", params={"task": "chief:0", "names": ["loss", "val_loss"]}
    ).json()
    steps = {series["name"]: series["steps"] for series in stored["series"]}
    assert steps == {"loss": [20, 40, 60], "val_loss": [20, 40, 60]}, stored

    # A new kernel: the servers kept serving, and fit goes on from the first kernel's backup.
    second = run_notebook(client_env(cluster, job_id, DIGITS_EPOCHS="5"), monkeypatch)
    assert "epochs run: [4, 5]" in second, second
    job = cluster.http.get(f"/jobs/{job_id}").json()
    assert job["status"] == "running"
    assert attempts(job) == servers  # no worker or ps was restarted
    assert job["client"]["session"] == 2 and not job["client"]["attached"]
    events = cluster.http.get(f"/jobs/{job_id}/events").json()
    # (A heartbeat late on a loaded machine may add "is gone" and "is back" between them.)
    comings_and_goings = [
        (e["message"].split(" (")[0], e["message"].rsplit(" ", 1)[-1])
        for e in events
        if e["kind"] == "client"
        and e["message"].endswith(("coordinator", "detached"))
        and "is back" not in e["message"]
    ]
    assert comings_and_goings == [
        ("client 1", "coordinator"),
        ("client 1", "detached"),
        ("client 2", "coordinator"),
        ("client 2", "detached"),
    ]
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints").json()
    assert {c["epoch"] for c in checkpoints} >= {1, 2, 3, 4, 5}
    cluster.http.post(f"/jobs/{job_id}/cancel")
    wait_no_processes(job_id, server=cluster.url, timeout=60)


def test_a_client_killed_mid_fit_leaves_the_job_until_its_idle_timeout(cluster: Cluster) -> None:
    # The job is submitted once the client has imported TensorFlow (it then reads the job's
    # id): its idle time runs from when the servers serve, and connect() waits for that.
    client = subprocess.Popen(
        [sys.executable, "-m", "tests.support.client_fit", "500", "-"],
        env=client_env(cluster, 0),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert client.stdin is not None and client.stdout is not None
        printed = []
        for line in client.stdout:
            printed.append(line)
            if line.startswith("client ready"):
                break
        spec = servers_spec("killed-client", client_idle_timeout=IDLE_SECONDS)
        job_id = cluster.submit(spec)["id"]
        client.stdin.write(f"{job_id}\n")
        client.stdin.flush()
        servers = attempts(cluster.wait_status(job_id, "running"))
        for line in client.stdout:
            printed.append(line)
            if line.startswith("client epoch=2 "):
                break
        else:
            pytest.fail("the client ended before its second epoch:\n" + "".join(printed[-40:]))
        # Checkpoint now reaches the client, which writes it at its next step.
        answer = cluster.http.post(f"/jobs/{job_id}/checkpoint", timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["checkpoint"]["trigger"] == "command"
        client.send_signal(signal.SIGKILL)
    finally:
        client.kill()
        client.wait()
    gone = cluster.wait_for(
        job_id, lambda j: not j["client"]["attached"], 30, "the killed client detached"
    )
    assert gone["status"] == "running"
    assert attempts(gone) == servers  # the servers did not notice
    ended = cluster.wait_status(job_id, "cancelled", timeout=60)
    assert ended["reason"].startswith("no client attached for ")
    assert ended["reason"].endswith(f"(client_idle_timeout {IDLE_SECONDS}s)")
    events = cluster.http.get(f"/jobs/{job_id}/events").json()
    assert any(
        e["kind"] == "client" and "is gone: no heartbeat for " in e["message"] for e in events
    ), events
    wait_no_processes(job_id, server=cluster.url, timeout=60)


# connect(spec) submits the job and waits for it; the custom-loop example, unchanged, then
# coordinates it: runtime.strategy() is the connected strategy.
CUSTOM_LOOP_CLIENT = """
import runpy, sys
from agents import runtime
spec = {"name": "custom-loop-client", "strategy": "parameter_server", "coordinator": "client",
        "replicas": {"worker": {"count": 2}, "ps": {"count": 1}}}
runtime.connect(spec)
sys.argv = ["custom_loop_ps.py", "--epochs", "2", "--steps-per-epoch", "12"]
try:
    runpy.run_path("examples/custom_loop_ps.py", run_name="__main__")
finally:
    runtime.flush()
"""


def test_connect_submits_a_spec_and_a_custom_loop_coordinates_it(cluster: Cluster) -> None:
    env = client_env(cluster, 0)
    del env["STRATA_JOB"]
    done = subprocess.run(
        [sys.executable, "-c", CUSTOM_LOOP_CLIENT],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = cluster.http.get("/jobs", params={"name": "custom-loop-client"}).json()["items"]
    assert len(jobs) == 1
    job = jobs[0]
    assert job["status"] == "running" and "chief:0" not in attempts(job)
    stored = cluster.http.get(
        f"/jobs/{job['id']}/metrics", params={"task": "chief:0", "names": ["epoch_loss"]}
    ).json()
    assert [series["steps"] for series in stored["series"]] == [[12, 24]], stored
    cluster.http.post(f"/jobs/{job['id']}/cancel")
    wait_no_processes(job["id"], server=cluster.url, timeout=60)
