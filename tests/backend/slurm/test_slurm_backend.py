"""Slurm on a real Slurm cluster: submission, Slurm's view in Strata's, cancel."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.requests import HTTPConnection

from backend.api import deps
from backend.jobs.spec import JobSpec
from backend.slurm.models import Phase
from backend.slurm.script import sbatch_options
from tests.backend.slurm.conftest import SlurmServer

pytestmark = pytest.mark.slow  # real Slurm daemons (root, slurm-wlm): not in `make check`

PS_JOB: dict[str, Any] = {
    "name": "digits-ps",
    "strategy": "parameter_server",
    "entrypoint": ["python", "examples/digits.py"],
    "replicas": {
        "chief": {"count": 1},
        "worker": {"count": 2, "gpus": 1},
        "ps": {"count": 1},
    },
    "slurm": {"partition": "debug", "time_limit": "10:00"},
}


async def submit(server: SlurmServer, spec: dict[str, Any]) -> int:
    answer = await server.api.http.post("/jobs", json=spec)
    assert answer.status_code == 201, answer.text
    job_id: int = answer.json()["id"]
    return job_id


async def wait_for(server: SlurmServer, job_id: int, what: str, check: Any) -> dict[str, Any]:
    """Run passes until the job satisfies `check` (Slurm starts jobs within a second or so)."""
    deadline = time.monotonic() + 30
    while True:
        await server.passes()
        job = await server.job(job_id)
        if check(job):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} not {what}: {job['status']} ({job['reason']})")
        time.sleep(0.3)


async def test_a_job_becomes_one_slurm_job_with_an_agent_per_node(server: SlurmServer) -> None:
    job_id = await submit(server, PS_JOB)
    job = await wait_for(
        server,
        job_id,
        "running in Slurm",
        lambda j: (j["reason"] or "").startswith("Slurm: running"),
    )
    slurm_id = job["slurm_job_id"]
    assert job["status"] == "pending"
    assert job["reason"] == "Slurm: running on n[1-2], waiting for its agents"
    assert server.named(job_id) == [slurm_id]
    shown = server.cluster.run("scontrol", "show", "job", slurm_id).stdout
    assert "NumNodes=2 " in shown and "TresPerNode=gres:gpu:1" in shown, shown
    assert "Partition=debug" in shown and "TimeLimit=00:10:00" in shown, shown
    assert f"Comment=strata job {job_id} record " in shown, shown
    # One agent per node, each with the node's GPU, and the job's own agent token.
    token = server.api.app.state.tokens.job_agent_token(job_id)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while len(list(server.agents_dir.glob("*.env"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    for node in ("n1", "n2"):
        args = (server.agents_dir / f"{node}.args").read_text().split("\n")
        assert args[:8] == [
            "--server",
            "http://127.0.0.1:8000",
            "--notice",
            "0",  # no notice by default: Slurm's KillWait may be shorter than any
            "--name",
            f"{server.name(job_id)}-{node}",
            "--gpus",
            "1",
        ], args
        env = dict(
            line.split("=", 1)
            for line in (server.agents_dir / f"{node}.env").read_text().splitlines()
            if "=" in line
        )
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
        assert env["STRATA_AGENT_TOKEN"] == token
        assert "STRATA_API_TOKEN" not in env  # nothing of the server's own settings
    # More passes submit nothing more.
    await server.passes(2)
    assert server.named(job_id) == [slurm_id]

    cancelled = await server.api.http.post(f"/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    await server.passes()
    server.cluster.wait_gone_or_ended(slurm_id)
    await server.passes()
    record = await server.record(job_id)
    assert record.phase is Phase.ended and record.slurm_state == "CANCELLED"
    job = await server.job(job_id)
    assert (job["status"], job["reason"]) == ("cancelled", "cancelled by request")


async def test_a_job_slurm_cannot_start_yet_waits_with_slurms_reason(server: SlurmServer) -> None:
    # Every GPU of the cluster held by another job: Slurm keeps ours pending.
    blocker = server.cluster.run(
        "sbatch",
        "--parsable",
        "--nodes=2",
        "--gres=gpu:2",
        "--output=/dev/null",
        "--wrap",
        "sleep 600",
    ).stdout.strip()
    server.cluster.wait_state(blocker, "RUNNING")
    job_id = await submit(server, PS_JOB)
    job = await wait_for(
        server, job_id, "waiting for Slurm", lambda j: j["reason"] == "Slurm: Resources"
    )
    assert job["status"] == "pending" and job["slurm_job_id"] is not None
    assert server.cluster.job_state(job["slurm_job_id"]) == "PENDING"
    # `strata jobs cancel` takes it out of Slurm's queue.
    assert (await server.api.http.post(f"/jobs/{job_id}/cancel")).status_code == 200
    await server.passes()
    server.cluster.wait_gone_or_ended(job["slurm_job_id"])
    assert server.cluster.job_state(blocker) == "RUNNING"


async def test_a_job_larger_than_the_cluster_waits_with_slurms_reason_until_cancelled(
    server: SlurmServer,
) -> None:
    # Three workers with a GPU each: three nodes, and the cluster has two.
    bigger = {**PS_JOB, "replicas": {**PS_JOB["replicas"], "worker": {"count": 3, "gpus": 1}}}
    job_id = await submit(server, bigger)
    # Slurm gives either reason for a job over the partition's nodes, depending on when its
    # scheduler last looked at it.
    too_big = ("Slurm: PartitionConfig", "Slurm: PartitionNodeLimit")
    job = await wait_for(server, job_id, "waiting for Slurm", lambda j: j["reason"] in too_big)
    assert job["status"] == "pending"
    slurm_id = job["slurm_job_id"]
    assert server.cluster.job_state(slurm_id) == "PENDING"
    assert (await server.api.http.post(f"/jobs/{job_id}/cancel")).status_code == 200
    await server.passes()
    assert server.cluster.wait_gone_or_ended(slurm_id) in (None, "CANCELLED")


async def test_a_job_no_node_can_ever_hold_fails_with_slurms_refusal(server: SlurmServer) -> None:
    # A worker with 3 GPUs, and the nodes have 2: sbatch itself refuses it.
    greedy = {**PS_JOB, "replicas": {**PS_JOB["replicas"], "worker": {"count": 1, "gpus": 3}}}
    job_id = await submit(server, greedy)
    job = await wait_for(server, job_id, "failed", lambda j: j["status"] == "failed")
    assert job["reason"] == (
        "Slurm refused the job: sbatch: error: Batch job submission failed: "
        "Requested node configuration is not available"
    )
    assert job["slurm_job_id"] is None
    assert (await server.record(job_id)).phase is Phase.ended


async def test_a_slurm_job_cancelled_outside_strata_ends_the_job_with_that_reason(
    server: SlurmServer,
) -> None:
    job_id = await submit(server, PS_JOB)
    job = await wait_for(
        server, job_id, "running in Slurm", lambda j: "running" in (j["reason"] or "")
    )
    server.cluster.run("scancel", job["slurm_job_id"])
    job = await wait_for(server, job_id, "cancelled", lambda j: j["status"] == "cancelled")
    assert job["reason"] == (
        f"Slurm job {job['slurm_job_id']} was cancelled outside Strata (CANCELLED)"
    )


async def test_a_slurm_job_that_fails_fails_the_job_and_a_restart_submits_anew(
    server: SlurmServer,
) -> None:
    agent = server.sync.settings.slurm_agent_command
    server.sync.settings.slurm_agent_command = "/bin/false"
    job_id = await submit(server, PS_JOB)
    job = await wait_for(server, job_id, "failed", lambda j: j["status"] == "failed")
    failed = job["slurm_job_id"]
    assert job["reason"] == f"Slurm job {failed} ended FAILED"
    # Restarted by request: its Slurm job is over, so it is submitted again (once).
    server.sync.settings.slurm_agent_command = agent
    assert (await server.api.http.post(f"/jobs/{job_id}/restart")).status_code == 200
    job = await wait_for(
        server, job_id, "running again", lambda j: "running on" in (j["reason"] or "")
    )
    assert job["slurm_job_id"] != failed
    await server.passes(2)
    assert sorted(server.named(job_id), key=int) == [failed, job["slurm_job_id"]]


async def test_after_a_crash_the_submitted_job_is_adopted_not_submitted_again(
    server: SlurmServer,
) -> None:
    # A crash between sbatch and recording its answer: the record exists, its Slurm job
    # too (submitted here as the server would have), but the record has no id.
    answer = await server.api.http.post("/jobs", json=PS_JOB)
    job_id = answer.json()["id"]
    await server.sync.submitter.record_new_jobs()
    record = await server.record(job_id)
    assert record.phase is Phase.recorded and record.slurm_job_id is None
    options = sbatch_options(
        settings=server.sync.settings,
        job_id=job_id,
        spec=JobSpec.model_validate(PS_JOB),
        name=record.name,
        marker=record.marker,
    )
    lost = server.cluster.run(
        "sbatch", "--parsable", *options, "--wrap", "sleep 600"
    ).stdout.strip()
    await server.passes()
    assert server.named(job_id) == [lost]
    record = await server.record(job_id)
    assert (record.phase, record.slurm_job_id) == (Phase.submitted, lost)
    assert (await server.job(job_id))["slurm_job_id"] == lost


async def test_a_slurm_controller_restart_changes_nothing_and_loses_nothing(
    server: SlurmServer,
) -> None:
    job_id = await submit(server, PS_JOB)
    job = await wait_for(
        server, job_id, "running in Slurm", lambda j: "running" in (j["reason"] or "")
    )
    slurm_id, reason = job["slurm_job_id"], job["reason"]
    server.cluster.stop_controller()
    # squeue retries for 9 s before it gives up: the pass gives up first (SlurmUnavailable).
    server.sync.commands.timeout = 2.0
    try:
        await server.passes()  # nothing is concluded from Slurm's silence
        job = await server.job(job_id)
        assert (job["status"], job["reason"]) == ("pending", reason)
        assert (await server.record(job_id)).phase is Phase.submitted
    finally:
        server.cluster.start_controller()
    await server.passes()
    assert (await server.job(job_id))["reason"] == reason
    assert server.named(job_id) == [slurm_id]
    assert server.cluster.job_state(slurm_id) == "RUNNING"
    assert (await server.api.http.post(f"/jobs/{job_id}/cancel")).status_code == 200
    await server.passes()
    assert server.cluster.wait_gone_or_ended(slurm_id) in (None, "CANCELLED")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"partition": "nosuch"},
            "Slurm refuses this job: sbatch: error: invalid partition specified: nosuch; "
            "allocation failure: Invalid partition name specified",
        ),
        (
            {"sbatch_options": ["--array=1-3"]},
            "sbatch_options[0] '--array=1-3' is not allowed; allowed (as --name or "
            "--name=value): --begin,",
        ),
    ],
)
async def test_bad_slurm_input_is_refused_with_slurms_message_or_the_allow_list(
    server: SlurmServer, section: dict[str, Any], message: str
) -> None:
    answer = await server.api.http.post("/jobs", json={**PS_JOB, "slurm": section})
    assert answer.status_code == 422, answer.text
    assert message in answer.text, answer.text
    assert (await server.api.http.get("/jobs")).json()["total"] == 0


async def test_routes_reach_the_slurm_loop_the_server_runs(server: SlurmServer) -> None:
    app = server.api.app
    assert isinstance(app, FastAPI)
    at = HTTPConnection({"type": "http", "app": app, "headers": []})
    assert deps.get_slurm(at) is server.sync
