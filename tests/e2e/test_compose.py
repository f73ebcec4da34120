"""`docker compose up`: the local cluster of docker-compose.yml on a real Docker engine.

Built and run the way an air-gapped site would: no image registry is reachable here, so the
base images the Dockerfile and the compose file name (python:3.11-slim-bookworm, postgres:15,
haproxy:2.6) are made from a Debian bookworm rootfs (mmdebstrap, from the Debian mirror, with
Debian's python3, postgresql-15 and haproxy packages) when the engine does not have them, the
Python packages come from a wheelhouse (`pip download`), and the dashboard is the one `make ui`
built on the host. Then `docker-compose up -d` (the v1 client Debian ships) with the shipped
compose file unchanged: two server replicas behind HAProxy (the `server` service), a
parameter_server job across two agent containers against PostgreSQL, the loss of the leading
replica's container (the other takes over; running tasks go on), the loss of an agent
container, and `down -v`.

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

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.docker import ComposeCluster, compose_cluster
from tests.support.factories import digits_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

AGENTS = ("agent-1", "agent-2")
REPLICAS = ("server-1", "server-2")  # behind the load balancer, the `server` service
CHECKPOINT_ROOT = "/var/lib/strata/checkpoints"
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=")
# Long enough that the chief is still training when its container is killed, some seconds
# after its third epoch was seen in the logs (20 epochs were all done by then once and the
# re-placed chief, finding no backup left, started again at 1).
SURVIVOR_EPOCHS = 60
# More than it gets to: it trains through the takeover and some epochs after it, whatever an
# epoch takes on the machine, and is cancelled then.
TAKEOVER_EPOCHS = 1000


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


def replicas(cluster: ComposeCluster) -> tuple[dict[str, Any], dict[str, str]]:
    """GET /replicas through the load balancer, and each listed replica's service, by its id
    (the host of its advertised URL: http://server-N:8000)."""
    listed: dict[str, Any] = cluster.http.get("/replicas").json()
    services = {}
    for replica in listed["replicas"]:
        found = re.fullmatch(r"http://(server-\d+):8000", replica["url"])
        assert found, listed
        services[replica["replica"]] = found[1]
    return listed, services


def own_health(cluster: ComposeCluster, service: str) -> dict[str, Any] | None:
    """The replica's /healthz, asked inside its container (not through the load balancer);
    None while it does not answer."""
    answer = cluster.project.compose(
        "exec",
        "-T",
        service,
        "python3",
        "-c",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/healthz',"
        " timeout=5).read().decode())",
        timeout=120,
        check=False,
    )
    try:
        found: dict[str, Any] = json.loads(answer)
    except json.JSONDecodeError:
        return None
    return found


def submit_retrying(cluster: ComposeCluster, spec: dict[str, Any], timeout: float) -> int:
    """POST /jobs as a client would while no replica leads: 503 (Retry-After) and a broken
    connection are tried again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = cluster.http.post("/jobs", json=spec)
            if answer.status_code == 201:
                job_id: int = answer.json()["id"]
                return job_id
            problem: object = (answer.status_code, answer.text[:300])
            assert answer.status_code in (502, 503, 504), problem
        except httpx.TransportError as exc:
            problem = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"no job submitted within {timeout}s: {problem!r}")
        time.sleep(0.5)


def test_the_example_runs_across_two_agent_containers_on_postgres(
    cluster: ComposeCluster,
) -> None:
    health = cluster.http.get("/healthz").json()
    assert (health["status"], health["database"]) == ("ok", "postgresql")
    assert health["role"] in ("leader", "follower")  # whichever replica the balancer chose
    # Both replicas run on the one database and one of them leads; each was noted with the
    # URL the other forwards to (its service name).
    listed, services = replicas(cluster)
    assert sorted(services.values()) == list(REPLICAS), listed
    assert [r["role"] for r in listed["replicas"]].count("leader") == 1, listed
    for replica, service in services.items():
        own = own_health(cluster, service)
        assert own is not None and own["replica"] == replica, (service, own)
        assert own["role"] == ("leader" if replica == listed["leader"] else "follower"), own
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
    for service in ("db", *REPLICAS, "server", *AGENTS):
        env = engine.docker(
            "inspect", "--format", "{{json .Config.Env}}", cluster.project.container(service)
        )
        if service != "server":  # the load balancer reads no secret
            assert "_FILE=" in env, (service, env)  # what it reads its secrets from
        assert not [name for name, value in cluster.secrets.items() if value in env], service
    for agent in AGENTS:
        assert cluster.project.exec(agent, "ls", "/var/lib/strata").split() == [
            "agent",  # its state volume: the identity it presents in hello, kept across restarts
            "agent-secrets",
            "checkpoints",
            "data",
            "secrets",  # the image's empty mount points: no volume there
            "shared",
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

    # The chief wrote its checkpoints into the shared volume: both replicas' containers and the
    # other agent's container, which ran no chief, see the same files at the same path.
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints").json()
    assert checkpoints, "no checkpoint was reported"
    latest = next(c for c in checkpoints if c["trigger"] != "export")  # the example exports
    job_dir = f"{CHECKPOINT_ROOT}/job-{job_id}"
    assert latest["path"] == f"{job_dir}/{latest['name']}"
    print(f"job {job_id}: {[(n, t['host'], t['attempt']) for n, t in tasks.items()]}")
    other = next(agent for agent in AGENTS if agent != tasks["chief:0"]["host"])
    for service in (*REPLICAS, other):
        listing = cluster.project.exec(service, "ls", "-1", job_dir).split()
        assert f"{latest['name']}.index" in listing, (service, listing)
    # The task logs the leader wrote are in the volume both replicas share.
    for service in REPLICAS:
        logs = cluster.project.exec(service, "ls", "-1", "/var/lib/strata/shared/logs")
        assert logs.split(), (service, logs)


def test_the_other_replica_takes_over_when_the_leading_one_is_killed(
    cluster: ComposeCluster,
) -> None:
    answer = cluster.http.post(
        "/jobs",
        json=digits_spec(
            "digits_ps.yaml", epochs=TAKEOVER_EPOCHS, steps_per_epoch=40, name="digits-ps-takeover"
        ),
    )
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    try:
        cluster.wait_for(
            job_id,
            lambda j: j["status"] == "running" and len(epochs(cluster, job_id, 0)) >= 2,
            480,
            "running past epoch 2",
        )
        listed, services = replicas(cluster)
        old = listed["leader"]
        doomed = services[old]
        for service in REPLICAS:  # a replica superseded while paused has exited 75 and restarted
            count = cluster.project.engine.docker(
                "inspect", "--format", "{{.RestartCount}}", cluster.project.container(service)
            )
            print(f"{service}: restarted {count.strip()} times; leads: {service == doomed}")
        survivor = next(service for service in REPLICAS if service != doomed)
        container = cluster.project.container(doomed)
        trained = len(epochs(cluster, job_id, 0))

        # The leader's container goes at once (SIGKILL), with its connections: agents and
        # runtimes reconnect through the load balancer to the survivor, which takes the lease.
        t0 = time.monotonic()
        cluster.project.engine.docker("kill", "--signal", "SIGKILL", container, timeout=60)
        placed = submit_retrying(
            cluster,
            {
                "name": "after-the-takeover",
                "strategy": "mirrored",
                "entrypoint": ["python", "-c", "print('placed after the takeover')"],
                "replicas": {"chief": {"count": 1, "gpus": 0}},
            },
            60,
        )
        cluster.timings["leader killed to job submitted"] = round(time.monotonic() - t0, 1)
        assert cluster.job(job_id)["status"] == "running"  # under the new leader, still training
        at_takeover = len(epochs(cluster, job_id, 0))
        cluster.wait_for(placed, lambda j: j["status"] == "succeeded", 120, "succeeded")
        cluster.timings["leader killed to job succeeded"] = round(time.monotonic() - t0, 1)
        assert "placed after the takeover" in cluster.logs(placed, "chief:0")
        listed, services = replicas(cluster)
        assert listed["leader"] != old and services[listed["leader"]] == survivor, listed
        assert (own_health(cluster, survivor) or {}).get("role") == "leader"
        assert (
            cluster.project.engine.docker(
                "inspect", "--format", "{{.State.Running}}", container
            ).strip()
            == "false"
        )  # nothing brought it back: the survivor leads alone

        # The job that trained across the takeover goes on: epochs after it, no task restarted,
        # no host lost.
        going = cluster.wait_for(
            job_id,
            lambda j: (
                j["status"] == "running" and len(epochs(cluster, job_id, 0)) >= at_takeover + 3
            ),
            120,
            "3 epochs further",
        )
        assert [t["attempt"] for t in going["tasks"]] == [0] * len(going["tasks"]), going["tasks"]
        assert going["restart_count"] == 0
        lost = [e for e in cluster.events(job_id) if e["data"].get("to") in ("lost", "failed")]
        assert not lost, lost
        assert all(host["status"] == "online" for host in cluster.hosts().values())
        logged = epochs(cluster, job_id, 0)
        print(
            f"job {job_id}: epoch {trained} when {doomed} (leading) was killed, {at_takeover} when"
            f" {survivor} answered as the leader, {len(logged)} now"
        )
        assert logged == list(range(1, len(logged) + 1)), logged  # each once, none again
    except BaseException:
        with contextlib.suppress(httpx.HTTPError):  # its GPUs free for the next test
            cluster.http.post(f"/jobs/{job_id}/cancel")
        raise
    cancelled = cluster.http.post(f"/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    cluster.wait_for(job_id, lambda j: j["status"] == "cancelled", 60, "cancelled")

    # Started again, the killed replica joins as a follower (the load balancer finds it at
    # whatever address it got).
    cluster.project.engine.docker("start", container, timeout=60)
    restarted = time.monotonic()
    deadline = restarted + 120
    while True:
        listed, services = replicas(cluster)
        own = own_health(cluster, doomed)
        if own is not None and own["role"] == "follower" and own["replica"] == old:
            break
        assert time.monotonic() < deadline, listed
        time.sleep(1)
    assert listed["leader"] != old and len(listed["replicas"]) == 2, listed
    answered = set()
    while old not in answered:  # round robin: it answers its share through the balancer
        answered.add(cluster.http.get("/healthz").json()["replica"])
        assert time.monotonic() < deadline, answered
        time.sleep(0.2)
    cluster.timings["restart to answering behind the balancer"] = round(
        time.monotonic() - restarted, 1
    )


def test_losing_an_agent_container_re_places_the_job_on_the_other(
    cluster: ComposeCluster,
) -> None:
    spec = digits_spec(
        "digits_ps.yaml", epochs=SURVIVOR_EPOCHS, steps_per_epoch=40, name="digits-ps-survivor"
    )
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
