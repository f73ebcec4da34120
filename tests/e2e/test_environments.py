"""Per-job environments on a real Docker engine: `environment.image` runs every task of a
parameter-server job in a container of an image that has TensorFlow and no Strata, across two
agents; an agent SIGKILLed mid-job leaves its containers running, and the same agent started
again removes them; at the end no container with Strata's labels is left.

The image is made offline (tests/support/docker.py `tensorflow_image`): the bookworm stand-in
rootfs of the compose test and the lock file's TensorFlow wheels. The engine is the running one
or a dockerd of the test's own, as in test_compose.py.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.cluster import REPO, Cluster, local_cluster
from tests.support.docker import (
    Engine,
    docker_engine,
    ensure_system_tools,
    run,
    tensorflow_image,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

AGENTS = {"box-0": "20700-20799", "box-1": "20800-20899"}
LABEL = "io.strata"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    ensure_system_tools()
    with docker_engine(tmp_path_factory.mktemp("engine")) as running:
        yield running


@pytest.fixture(scope="module")
def image(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tensorflow_image(engine, tmp_path_factory.mktemp("image")) as tag:
        yield tag


@pytest.fixture(scope="module")
def cluster(
    engine: Engine, image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        if "DOCKER_HOST" in engine.env:  # the agents reach the test's own engine
            patch.setenv("DOCKER_HOST", engine.env["DOCKER_HOST"])
        with local_cluster(tmp_path_factory.mktemp("environments") / "data", agents=0) as running:
            for name, ports in AGENTS.items():
                running.start_agent(name, gpus=2, ports=ports)
            for name in AGENTS:
                running.wait_host(name, "online", timeout=60)
            try:
                yield running
            finally:
                running.stop_extra_agents()
                # Agents stopped with SIGTERM stop and remove their containers first.
                left = strata_containers(engine)
                for container in left:
                    engine.docker("rm", "--force", container["id"], check=False)
                assert left == [], "containers left after the agents"


def strata_containers(engine: Engine, **labels: str | int) -> list[dict[str, str]]:
    """Every container (running or not) that carries Strata's labels, with its labels."""
    filters = [f"label={LABEL}.{name}={value}" for name, value in labels.items()]
    ids = engine.docker(
        "ps",
        "--all",
        "--quiet",
        "--no-trunc",
        "--filter",
        f"label={LABEL}.agent",
        *(arg for item in filters for arg in ("--filter", item)),
    ).split()
    found = []
    for container in ids:
        listed = json.loads(engine.docker("inspect", container, check=False) or "[]")
        if not listed:
            continue  # removed since `ps` listed it
        inspected = listed[0]
        found.append(
            {
                "id": container,
                "user": inspected["Config"]["User"],
                "network": inspected["HostConfig"]["NetworkMode"],
                **{
                    key.removeprefix(f"{LABEL}."): value
                    for key, value in inspected["Config"]["Labels"].items()
                    if key.startswith(LABEL)
                },
            }
        )
    return found


def wait_none_left(engine: Engine, job_id: int, timeout: float = 60) -> None:
    """A job's end does not wait for its other tasks' stop: their containers go soon after."""
    deadline = time.monotonic() + timeout
    while (left := strata_containers(engine, job=job_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"containers of job {job_id} still there after {timeout}s"


def digits_ps(image: str, epochs: int) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / "digits_ps.yaml").read_text())
    spec["entrypoint"][spec["entrypoint"].index("--epochs") + 1] = str(epochs)
    spec["environment"] = {"image": image}
    return spec


def test_the_image_has_tensorflow_and_no_strata(engine: Engine, image: str) -> None:
    probe = "import tensorflow, tf_keras, sklearn; import agents"
    done = run(
        [engine.client, "run", "--rm", image, "python", "-c", probe], env=engine.env, check=False
    )
    assert done.returncode == 1 and "No module named 'agents'" in done.stderr, done


def test_a_parameter_server_job_runs_in_containers_across_two_agents(
    cluster: Cluster, engine: Engine, image: str
) -> None:
    # Each agent said in its hello which engine it has and which images are there.
    for host in cluster.http.get("/hosts").json():
        assert host["engine"]["kind"] == "docker", host
        assert image in host["engine"]["images"], host["engine"]
    job = cluster.submit(digits_ps(image, epochs=4))
    job_id = job["id"]
    seen: dict[str, dict[str, str]] = {}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(seen) < 4:
        for container in strata_containers(engine, job=job_id):
            seen.setdefault(container["task"], container)
        if cluster.job(job_id)["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.5)
    done = cluster.wait_status(job_id, "succeeded", timeout=400)
    assert sorted(seen) == ["chief:0", "ps:0", "worker:0", "worker:1"], seen
    for container in seen.values():
        assert container["user"] == "65534:65534"  # never root
        assert container["network"] == "host"  # TensorFlow's gRPC ports are the host's
    assert {task["host"] for task in done["tasks"]} == set(AGENTS)
    chief_log = cluster.logs(job_id, "chief:0")
    assert any(line.startswith("epoch=3 ") for line in chief_log), chief_log[-20:]
    wait_none_left(engine, job_id)


def test_an_agent_killed_mid_job_leaves_no_container_once_restarted(
    cluster: Cluster, engine: Engine, image: str
) -> None:
    job_id = cluster.submit(digits_ps(image, epochs=200))["id"]
    running = cluster.wait_for(
        job_id,
        lambda j: (
            j["status"] == "running"
            and all(t["status"] == "running" for t in j["tasks"])
            and any(t["host"] == "box-1" for t in j["tasks"])
        ),
        timeout=300,
        what="running with a task on box-1",
    )
    lost = {(t["name"], t["attempt"]) for t in running["tasks"] if t["host"] == "box-1"}
    victim = cluster.extra_agents[list(AGENTS).index("box-1")]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # Killed, the agent could not stop them: its attempts' containers run on.
    orphans = [
        c for c in strata_containers(engine, job=job_id) if (c["task"], int(c["attempt"])) in lost
    ]
    assert orphans, f"no container of {lost} after the agent's SIGKILL"

    cluster.start_agent("box-1", gpus=2, ports=AGENTS["box-1"])  # same state dir, same identity
    cluster.wait_host("box-1", "online", timeout=60)
    deadline = time.monotonic() + 30
    left = orphans
    while left and time.monotonic() < deadline:
        remaining = strata_containers(engine, job=job_id)
        left = [c for c in remaining if c["id"] in {o["id"] for o in orphans}]
        time.sleep(0.5)
    assert left == [], f"containers of the lost attempts still there: {left}"
    agent_log = (cluster.data_dir / "agent-box-1.log").read_text()
    assert "removed the container of" in agent_log

    # The lost attempts are restarted by the role rules, in new containers.
    cluster.wait_for(
        job_id,
        lambda j: (
            j["status"] == "running"
            and all(t["status"] == "running" for t in j["tasks"])
            and all(
                t["attempt"] > attempt
                for name, attempt in lost
                for t in j["tasks"]
                if t["name"] == name
            )
        ),
        timeout=300,
        what="running again with new attempts of the lost tasks",
    )
    cluster.http.post(f"/jobs/{job_id}/cancel")
    cluster.wait_status(job_id, "cancelled", timeout=120)
    wait_none_left(engine, job_id)


def test_an_image_no_engine_can_give_fails_the_task_with_the_engines_reason(
    cluster: Cluster, engine: Engine
) -> None:
    spec = {
        "name": "no-such-image",
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", "print('never')"],
        "replicas": {"chief": {"count": 1, "gpus": 0}},
        "restart": {"policy": "never"},
        "environment": {"image": "strata-e2e-no-such-image:never"},
    }
    job_id = cluster.submit(spec)["id"]
    failed = cluster.wait_status(job_id, "failed", timeout=120)
    messages = " ".join(e["message"] for e in cluster.events(job_id))
    assert "strata-e2e-no-such-image:never" in messages, (failed["reason"], messages)
    assert strata_containers(engine, job=job_id) == []
