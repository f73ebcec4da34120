"""Interruptions at random moments of running parameter_server and multi_worker_mirrored
jobs: a preemption by a job of higher priority, a drain of one of the job's hosts, a suspend
and resume, and SIGTERM to one of the job's agents (which gives notice and is started again).

After each one the job must train again, and the work it lost is measured from the runtime's
own step counts (the metric points its lead task streamed, per attempt): the interrupted
attempt's last reported step, against the step the next attempt resumed from (at least its
first epoch end less one epoch). Each must be at most one checkpoint interval; every job must
end succeeded with no restart and no failure counted.

`STRATA_CHAOS_INTERRUPTIONS` sets how many interruptions each job gets (default 2: the PS job
gets two kinds and the MWM job the other two, so a run has each once);
`STRATA_CHAOS_SEED` replays a run (the seed is printed)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_checkpoints import EXAMPLES, ps_spec
from tests.e2e.test_interruptions import STEPS_PER_EPOCH, UNTIL
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

INTERRUPTIONS = int(os.environ.get("STRATA_CHAOS_INTERRUPTIONS", "2"))
KINDS = ("preempt", "drain", "suspend", "agent-sigterm")
CHECKPOINT_EPOCHS = 10
INTERVAL_STEPS = CHECKPOINT_EPOCHS * STEPS_PER_EPOCH  # one checkpoint interval
GPU_HOSTS = ("g-0", "g-1", "g-2")
HOSTS = {"cpu-0": 0, **dict.fromkeys(GPU_HOSTS, 2)}
# An agent's notice long enough for a checkpoint on a loaded machine; it ends with the tasks.
AGENT_ENV = {"STRATA_AGENT_NOTICE": "60"}


@dataclass
class Fleet:
    """The cluster's agents, each of which may be told to stop and started again."""

    cluster: Cluster
    agents: dict[str, subprocess.Popen[bytes]]

    def start(self, name: str) -> None:
        index = list(HOSTS).index(name)
        ports = f"{24000 + 100 * index}-{24000 + 100 * index + 99}"
        self.agents[name] = self.cluster.start_agent(name, HOSTS[name], ports, env=AGENT_ENV)
        self.cluster.wait_host(name, "online", timeout=60)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """cpu-0 without GPUs (where a PS job's chief and ps go) and three hosts of two GPUs: a
    job whose two workers take two GPUs each leaves one GPU host free to move to."""
    with local_cluster(tmp_path_factory.mktemp("chaos") / "data", agents=0) as cluster:
        fleet = Fleet(cluster, {})
        for name in HOSTS:
            fleet.start(name)
        yield fleet


def lead_steps(cluster: Cluster, job_id: int, lead: str) -> dict[int, tuple[int, int | None]]:
    """Per attempt of the lead task: the highest step it reported, and its first epoch end."""
    database = sqlite3.connect(f"file:{cluster.data_dir / 'strata.db'}?mode=ro", uri=True)
    try:
        rows = database.execute(
            "SELECT attempt, MAX(step), MIN(CASE WHEN name = 'epoch' THEN step END) "
            "FROM metric_points WHERE job_id = ? AND task = ? GROUP BY attempt",
            (job_id, lead),
        ).fetchall()
    finally:
        database.close()
    return {attempt: (highest, first_epoch) for attempt, highest, first_epoch in rows}


def attempt_of(job: dict[str, Any], lead: str) -> int:
    attempt: int = next(t["attempt"] for t in job["tasks"] if t["name"] == lead)
    return attempt


def training(cluster: Cluster, job_id: int, lead: str, attempt: int, epochs: int) -> int:
    """Waits until the lead's attempt `attempt` or a later one has reported `epochs` epoch
    ends; the attempt it is at."""
    found: list[int] = []

    def trained(job: dict[str, Any]) -> bool:
        if job["status"] != "running":
            return False
        now = attempt_of(job, lead)
        if now < attempt:
            return False
        epoch_ends = lead_epoch_ends(cluster, job_id, lead, now)
        found[:] = [now]
        return epoch_ends >= epochs

    cluster.wait_for(job_id, trained, 240, f"training in attempt {attempt} or later")
    return found[0]


def lead_epoch_ends(cluster: Cluster, job_id: int, lead: str, attempt: int) -> int:
    database = sqlite3.connect(f"file:{cluster.data_dir / 'strata.db'}?mode=ro", uri=True)
    try:
        (count,) = database.execute(
            "SELECT COUNT(*) FROM metric_points WHERE job_id = ? AND task = ? AND attempt = ? "
            "AND name = 'epoch'",
            (job_id, lead, attempt),
        ).fetchone()
    finally:
        database.close()
    return int(count)


def hosts_of(job: dict[str, Any]) -> list[str]:
    return sorted({t["host"] for t in job["tasks"] if t["host"] is not None})


def preempt(fleet: Fleet, job_id: int, release: Path) -> None:
    """Two workers of two GPUs each at priority 10: room only if the job makes way."""
    cluster = fleet.cluster
    high = cluster.submit(
        {
            "name": "takes-two-hosts",
            "strategy": "multi_worker_mirrored",
            "entrypoint": ["python", "-c", UNTIL, str(release)],
            "replicas": {"worker": {"count": 2, "gpus": 2}},
            "restart": {"policy": "never"},
            "priority": 10,
        }
    )["id"]
    try:
        cluster.wait_status(high, "running", timeout=180)
        event = [e for e in cluster.events(job_id) if e["data"].get("interruption")][-1]
        assert event["data"]["by"] == high, event
    finally:
        release.touch()
    cluster.wait_status(high, "succeeded", timeout=60)


def drain(fleet: Fleet, job_id: int, host: str) -> None:
    cluster = fleet.cluster
    answer = cluster.http.post(f"/hosts/{host}/drain", params={"deadline_seconds": 120})
    assert answer.status_code == 200, answer.text

    def drained(_: dict[str, Any]) -> bool:
        found = next(h for h in cluster.http.get("/hosts").json() if h["name"] == host)
        return bool(found["live_tasks"] == 0)

    cluster.wait_for(job_id, drained, 180, f"off the drained {host}")
    assert cluster.http.delete(f"/hosts/{host}/drain").status_code == 200


def suspend(fleet: Fleet, job_id: int) -> None:
    cluster = fleet.cluster
    answer = cluster.http.post(f"/jobs/{job_id}/suspend", timeout=120)
    assert answer.status_code == 200, answer.text
    wait_no_processes(job_id, server=cluster.url, timeout=60)
    assert cluster.http.post(f"/jobs/{job_id}/resume").status_code == 200


def agent_sigterm(fleet: Fleet, job_id: int, host: str) -> None:
    """The host's agent is told to stop: it gives notice, waits for its tasks, and exits;
    it is started again (the same identity) once the job has left it."""
    agent = fleet.agents[host]
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=120)
    fleet.start(host)


def job_spec(strategy: str, epochs: int) -> tuple[dict[str, Any], str]:
    """The digits job with two workers of two GPUs each, and its lead task."""
    checkpoint = {"every_epochs": CHECKPOINT_EPOCHS}
    if strategy == "parameter_server":
        spec = ps_spec("chaos-ps", epochs, checkpoint=checkpoint)
        lead = "chief:0"
    else:
        spec = yaml.safe_load((EXAMPLES / "digits_mwm.yaml").read_text())
        spec |= {"name": "chaos-mwm", "checkpoint": checkpoint}
        spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", str(epochs)]
        lead = "worker:0"
    spec["replicas"]["worker"]["gpus"] = 2
    return spec, lead


@pytest.mark.timeout(300 + 60 * INTERRUPTIONS)  # each interruption is a few stops and starts
@pytest.mark.parametrize("strategy", ["parameter_server", "multi_worker_mirrored"])
def test_interruptions_at_random_moments_lose_at_most_a_checkpoint_interval(
    fleet: Fleet, strategy: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("STRATA_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"chaos seed {seed}, {INTERRUPTIONS} interruptions of a {strategy} job")
    chance = random.Random(seed)
    first = 0 if strategy == "parameter_server" else len(KINDS) // 2
    kinds = [KINDS[(first + i) % len(KINDS)] for i in range(INTERRUPTIONS)]
    chance.shuffle(kinds)
    # Each interruption comes one to two epochs (and a fraction) into an attempt, but epochs
    # are short (a fraction of a second), so a cycle's waits train up to about a dozen: the
    # job must still be training at the last one.
    epochs = 20 * INTERRUPTIONS + 30
    cluster = fleet.cluster
    spec, lead = job_spec(strategy, epochs)
    job_id = cluster.submit(spec)["id"]
    try:
        interrupt_at_random(fleet, job_id, lead, kinds, chance, tmp_path)
    except BaseException:  # a failed run would leave the cluster's GPUs held for the next one
        cluster.http.post(f"/jobs/{job_id}/cancel")
        raise
    done = cluster.wait_status(job_id, "succeeded", timeout=600)
    assert (done["restart_count"], done["failure_count"]) == (0, 0), cluster.events(job_id)
    interruptions = [e for e in cluster.events(job_id) if e["data"].get("interruption")]
    assert len(interruptions) >= len(kinds)
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints", params={"include_deleted": True})
    saved = [c["step"] for c in checkpoints.json() if c["trigger"] != "export"]
    assert max(saved) == epochs * STEPS_PER_EPOCH  # trained to the end, nothing run twice
    wait_no_processes(job_id, server=cluster.url)


def interrupt_at_random(
    fleet: Fleet,
    job_id: int,
    lead: str,
    kinds: list[str],
    chance: random.Random,
    tmp_path: Path,
) -> None:
    """Each kind in turn, at a random moment; asserts the work each lost."""
    cluster = fleet.cluster
    attempt = training(cluster, job_id, lead, 0, 1)
    measured: list[tuple[str, int, int, int]] = []
    print("interruption, attempt, last step reported, steps lost at most:")
    actions: dict[str, Callable[[str], None]] = {
        "preempt": lambda _: preempt(fleet, job_id, tmp_path / f"release-{len(measured)}"),
        "drain": lambda host: drain(fleet, job_id, host),
        "suspend": lambda _: suspend(fleet, job_id),
        "agent-sigterm": lambda host: agent_sigterm(fleet, job_id, host),
    }
    for kind in kinds:
        attempt = training(cluster, job_id, lead, attempt, chance.randint(1, 2))
        time.sleep(chance.uniform(0, 0.5))  # somewhere inside an epoch
        host = chance.choice(hosts_of(cluster.job(job_id)))
        actions[kind](host)
        resumed = training(cluster, job_id, lead, attempt + 1, 1)
        steps = lead_steps(cluster, job_id, lead)
        reported = steps[attempt][0]
        first_epoch_end = steps[resumed][1]
        assert first_epoch_end is not None
        # It resumed at a step no earlier than one epoch before its first epoch end.
        lost = max(0, reported - (first_epoch_end - STEPS_PER_EPOCH))
        measured.append((kind, attempt, reported, lost))
        assert lost <= INTERVAL_STEPS, (kind, host, steps, cluster.events(job_id)[-5:])
        attempt = resumed
        print(*measured[-1], sep="\t", flush=True)
