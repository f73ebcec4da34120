"""Nothing outlives its task: helpers in a new session, double-forked daemons and the pipes they
hold neither keep a job running nor survive it (real server, agents and processes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import Cluster, job_processes, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

# A helper in its own session that keeps the task's stdout (as TensorBoard or a data server
# started with `Popen(..., start_new_session=True)` does).
HELPER = (
    "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
    " start_new_session=True)\n"
)
# A daemon the classic way: fork, setsid, fork again, the middle one exits.
DAEMON = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(600)\n"
    "    os._exit(0)\n"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("containment") / "data") as running:
        yield running


def spec(name: str, code: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", code],
        "replicas": {"chief": {"count": 1}},
        "restart": {"policy": "never"},
        **extra,
    }


def assert_succeeds_quickly_and_leaves_nothing(cluster: Cluster, code: str) -> None:
    job = cluster.submit(spec("leaves-helpers", code))
    started = time.monotonic()
    done = cluster.wait_status(job["id"], "succeeded", timeout=60)
    # From submission: placing and starting takes a moment, the exit itself no more than that.
    assert time.monotonic() - started < 20, done
    wait_no_processes(job["id"], timeout=10, server=cluster.url)


def test_a_helper_in_a_new_session_that_keeps_stdout_neither_holds_nor_outlives_the_job(
    cluster: Cluster,
) -> None:
    assert_succeeds_quickly_and_leaves_nothing(cluster, HELPER + "print('done', flush=True)\n")


def test_a_double_forked_daemon_does_not_outlive_the_job(cluster: Cluster) -> None:
    assert_succeeds_quickly_and_leaves_nothing(cluster, DAEMON + "print('done', flush=True)\n")


def test_a_cancelled_job_leaves_none_of_its_workers_helpers(cluster: Cluster) -> None:
    code = HELPER + DAEMON + "print('helpers up', flush=True)\ntime.sleep(600)\n"
    job = cluster.submit(
        spec(
            "cancel-helpers",
            code,
            strategy="multi_worker_mirrored",
            replicas={"worker": {"count": 2}},
        )
    )
    cluster.wait_for(
        job["id"],
        lambda j: all("helpers up" in cluster.logs(j["id"], f"worker:{i}") for i in (0, 1)),
        60,
        "helpers started",
    )
    # Each worker: its main process, the helper and the daemon.
    assert len(job_processes(job["id"], cluster.url)) >= 6
    answer = cluster.http.post(f"/jobs/{job['id']}/cancel")
    assert answer.status_code == 200, answer.text
    cluster.wait_status(job["id"], "cancelled", timeout=30)
    wait_no_processes(job["id"], timeout=20, server=cluster.url)


def test_a_task_over_its_memory_limit_is_killed_and_the_job_says_why(cluster: Cluster) -> None:
    code = "print('allocating', flush=True)\ndata = b'x' * (512 << 20)\nprint('survived')\n"
    job = cluster.submit(
        spec("over-memory", code, replicas={"chief": {"count": 1, "memory": "64MiB"}})
    )
    done = cluster.wait_status(job["id"], "failed", timeout=60)
    assert done["reason"] == "chief:0 was killed: over its 64 MiB memory limit", done["reason"]
    assert "survived" not in cluster.logs(job["id"], "chief:0")
    # The attempt's figures from its cgroups come with its exit.
    exited = next(e for e in cluster.events(job["id"]) if e["data"].get("over_memory_limit"))
    assert exited["data"]["memory_peak_bytes"] >= 60 << 20, exited
    assert exited["data"]["cpu_seconds"] > 0, exited
    wait_no_processes(job["id"], timeout=10, server=cluster.url)


def test_a_restarted_agent_ends_the_helpers_its_killed_predecessor_left(cluster: Cluster) -> None:
    # An agent of its own, with more GPUs than the others, so that the job lands on it.
    agent = cluster.start_agent("contain-0", gpus=4, ports="20600-20699")
    cluster.wait_host("contain-0", "online")
    code = HELPER + DAEMON + "print('helpers up', flush=True)\ntime.sleep(600)\n"
    job = cluster.submit(spec("orphans", code, replicas={"chief": {"count": 1, "gpus": 3}}))
    cluster.wait_for(
        job["id"], lambda j: "helpers up" in cluster.logs(j["id"], "chief:0"), 60, "helpers up"
    )
    agent.kill()  # no time to stop anything: the main process dies with it (PDEATHSIG)
    agent.wait()
    time.sleep(1)
    assert job_processes(job["id"], cluster.url), "the helpers should outlive a killed agent"
    cluster.start_agent("contain-0", gpus=4, ports="20600-20699")  # same name, same state dir
    cluster.wait_host("contain-0", "online")
    wait_no_processes(job["id"], timeout=10, server=cluster.url)
