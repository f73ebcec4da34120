"""`docker compose up`: the local cluster of docker-compose.yml on a real Docker engine.

Built and run the way an air-gapped site would: no image registry is reachable here, so the
base images the Dockerfile and the compose file name (python:3.11-slim-bookworm, postgres:15)
are made from a Debian bookworm rootfs (mmdebstrap, from the Debian mirror) when the engine
does not have them, the Python packages come from a wheelhouse (`pip download`), and the
dashboard is the one `make ui` built on the host. Then `docker-compose up -d` (the v1 client
Debian ships) with the shipped compose file unchanged, a parameter_server job across two agent
containers against PostgreSQL, the loss of an agent container, and `down -v`.

Engine: a running one is used as it is; otherwise the test starts its own dockerd (private
socket, data and exec roots under /var/tmp, removed afterwards). On this CI machine dockerd's
defaults work (overlay2, compose's bridge network with iptables and the published port): about
5 minutes with a cold rootfs cache. Where a sandbox refuses them it falls back to vfs (about
7 minutes: vfs copies every layer), then vfs without iptables (see tests/support/docker.py).
Everything made here is removed, also on failure: the project's containers, network and
volumes (`down -v`) and the images it built or tagged; images that were there before are left
alone. The rootfs tarball is cached in ~/.cache/strata/e2e-compose.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.docker import ComposeCluster, compose_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

AGENTS = ("agent-1", "agent-2")
CHECKPOINT_ROOT = "/var/lib/strata/checkpoints"
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=")
# Long enough that the chief is still training when its container is killed, some seconds
# after its third epoch was seen in the logs (20 epochs were all done by then once and the
# re-placed chief, finding no backup left, started again at 1).
SURVIVOR_EPOCHS = 60


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ComposeCluster]:
    with compose_cluster(tmp_path_factory.mktemp("compose"), AGENTS) as running:
        failed_before = request.session.testsfailed
        yield running
        if request.session.testsfailed > failed_before:
            print(f"compose diagnostics:\n{running.project.diagnostics()[-20000:]}")


def started_in(cluster: ComposeCluster, agent: str, job_id: int, task: str, attempt: int) -> bool:
    """Whether the agent in that container says it started this attempt (its own log)."""
    return f"started {task} of job {job_id} (attempt {attempt}," in cluster.project.logs(agent)


def epochs(cluster: ComposeCluster, job_id: int, attempt: int) -> list[int]:
    lines = cluster.logs(job_id, "chief:0", attempt)
    return [int(m[1]) for line in lines if (m := EPOCH_LINE.match(line))]


def test_the_example_runs_across_two_agent_containers_on_postgres(
    cluster: ComposeCluster,
) -> None:
    health = cluster.http.get("/healthz").json()
    assert (health["status"], health["database"]) == ("ok", "postgresql")
    assert health["role"] == "leader"  # the one server leads at once
    hosts = cluster.hosts()
    for agent in AGENTS:
        assert hosts[agent]["address"] == agent  # its service name, which the others resolve
        assert len(hosts[agent]["devices"]) == 2
    dashboard = cluster.http.get("/ui/")
    assert dashboard.status_code == 200 and "<script" in dashboard.text
    # The secrets were made at the first `up` and reach the processes as files: they are in
    # no image and in no container's environment, and the agents, where training code runs,
    # hold the agent token only.
    engine = cluster.project.engine
    built = engine.docker("image", "inspect", cluster.image) + engine.docker(
        "history", "--no-trunc", cluster.image
    )
    assert not [name for name, value in cluster.secrets.items() if value in built]
    for service in ("db", "server", *AGENTS):
        env = engine.docker(
            "inspect", "--format", "{{json .Config.Env}}", cluster.project.container(service)
        )
        assert "_FILE=" in env, (service, env)  # what it reads its secrets from
        assert not [name for name, value in cluster.secrets.items() if value in env], service
    for agent in AGENTS:
        assert cluster.project.exec(agent, "ls", "/var/lib/strata").split() == [
            "agent",  # its state volume: the identity it presents in hello, kept across restarts
            "agent-secrets",
            "checkpoints",
            "data",
            "secrets",  # the image's empty mount point: no volume there
        ]
        assert cluster.project.exec(agent, "ls", "-A", "/var/lib/strata/secrets").split() == []
        identity = cluster.project.exec(agent, "cat", "/var/lib/strata/agent/identity")
        assert re.fullmatch(r"[0-9a-f]{32}\n?", identity), identity
        held = cluster.project.exec(agent, "cat", "/var/lib/strata/agent-secrets/agent-token")
        assert held.strip() == cluster.secrets["agent-token"]

    # What the README tells a user to type, from the checkout, against the published port:
    # --follow streams the job over the websocket and exits 0 once it has succeeded.
    t0 = time.monotonic()
    submitted = subprocess.run(
        [sys.executable, "-m", "backend.cli", "submit", "examples/digits_ps.yaml", "--follow"],
        cwd=cluster.checkout,
        env={**os.environ, "STRATA_SERVER": cluster.url, "STRATA_TOKEN": cluster.api_token},
        capture_output=True,
        text=True,
        timeout=480,
    )
    found = re.search(r"job (\d+) \(digits-ps\) submitted", submitted.stdout)
    assert found, (submitted.stdout, submitted.stderr)
    job_id = int(found[1])
    assert submitted.returncode == 0, (submitted.stdout[-3000:], submitted.stderr[-3000:])
    assert f"job {job_id} succeeded" in submitted.stdout
    done = cluster.job(job_id)
    assert done["status"] == "succeeded"
    cluster.timings["job 1 (submit to succeeded)"] = round(time.monotonic() - t0, 1)

    tasks = {t["name"]: t for t in done["tasks"]}
    assert set(tasks) == {"chief:0", "worker:0", "worker:1", "ps:0"}
    assert {t["host"] for t in tasks.values()} == set(AGENTS)
    for name, task in tasks.items():  # each agent container ran what the server placed on it
        assert started_in(cluster, task["host"], job_id, name, task["attempt"]), (name, task)
    assert "strata-example: done" in cluster.logs(job_id, "chief:0")

    # The chief wrote its checkpoints into the shared volume: the server's container and the
    # other agent's container, which ran no chief, see the same files at the same path.
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints").json()
    assert checkpoints, "no checkpoint was reported"
    latest = next(c for c in checkpoints if c["trigger"] != "export")  # the example exports
    job_dir = f"{CHECKPOINT_ROOT}/job-{job_id}"
    assert latest["path"] == f"{job_dir}/{latest['name']}"
    print(f"job {job_id}: {[(n, t['host'], t['attempt']) for n, t in tasks.items()]}")
    other = next(agent for agent in AGENTS if agent != tasks["chief:0"]["host"])
    for service in ("server", other):
        listing = cluster.project.exec(service, "ls", "-1", job_dir).split()
        assert f"{latest['name']}.index" in listing, (service, listing)


def test_losing_an_agent_container_re_places_the_job_on_the_other(
    cluster: ComposeCluster,
) -> None:
    spec: dict[str, Any] = yaml.safe_load(
        (cluster.checkout / "examples/digits_ps.yaml").read_text()
    )
    spec["name"] = "digits-ps-survivor"
    spec["entrypoint"] = [
        "python",
        "examples/digits.py",
        "--epochs",
        str(SURVIVOR_EPOCHS),
        "--steps-per-epoch",
        "40",
    ]
    spec["restart"] = {"policy": "on_failure", "max_restarts": 5, "backoff_seconds": 0}
    spec["checkpoint"] |= {"backup_every_seconds": 0}  # short epochs: back up every one
    answer = cluster.http.post("/jobs", json=spec)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]

    running = cluster.wait_for(
        job_id,
        lambda j: (
            j["status"] == "running"
            and len(
                epochs(
                    cluster,
                    job_id,
                    next(t for t in j["tasks"] if t["name"] == "chief:0")["attempt"],
                )
            )
            >= 3
        ),
        480,
        "running past epoch 3",
    )
    chief = next(t for t in running["tasks"] if t["name"] == "chief:0")
    doomed = chief["host"]
    survivor = next(agent for agent in AGENTS if agent != doomed)
    container = cluster.project.container(doomed)

    # The host goes away at once, with every process in it (no agent left to say goodbye).
    t0 = time.monotonic()
    cluster.project.engine.docker("kill", container, timeout=60)
    cluster.wait_hosts([doomed], "lost", 60)
    cluster.timings["kill to host lost"] = round(time.monotonic() - t0, 1)
    cluster.wait_for(
        job_id,
        lambda j: j["status"] == "running" and all(t["host"] == survivor for t in j["tasks"]),
        300,
        f"running again on {survivor}",
    )
    cluster.timings["kill to running again"] = round(time.monotonic() - t0, 1)
    done = cluster.wait_for(job_id, lambda j: j["status"] == "succeeded", 420, "succeeded")
    cluster.timings["kill to succeeded"] = round(time.monotonic() - t0, 1)

    assert (
        cluster.project.engine.docker(
            "inspect", "--format", "{{.State.Running}}", container
        ).strip()
        == "false"
    )  # nothing brought it back: the job really moved
    assert cluster.hosts()[doomed]["status"] == "lost"
    tasks = {t["name"]: t for t in done["tasks"]}
    assert {t["host"] for t in tasks.values()} == {survivor}
    for name, task in tasks.items():
        assert started_in(cluster, survivor, job_id, name, task["attempt"]), (name, task)
    assert tasks["chief:0"]["attempt"] > chief["attempt"]
    assert done["restart_count"] >= 1
    messages = [e["message"] or "" for e in cluster.events(job_id)]
    assert any(
        m.startswith(f"host {doomed} was lost") and "re-placing the job" in m for m in messages
    ), messages

    # The chief resumed on the survivor from the backup the dead container's chief wrote to
    # the shared volume: it goes on from a later epoch instead of starting again at 1.
    before = epochs(cluster, job_id, chief["attempt"])
    after = epochs(cluster, job_id, tasks["chief:0"]["attempt"])
    print(f"job {job_id}: chief epochs on {doomed} {before}, then on {survivor} {after}")
    assert len(before) >= 3 and after, (before, after)
    assert after[0] > 1 and after == list(range(after[0], SURVIVOR_EPOCHS + 1)), (before, after)
