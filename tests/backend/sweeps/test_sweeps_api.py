"""The sweeps API and one iteration of the sweep runner at a time, on a real database and
Optuna's real storage; trials' metrics are written as the ingest writes them."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.orm.exc import StaleDataError

from agents.protocol import MetricPoint as WirePoint
from backend.db import utcnow
from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.scheduling.sweep_runner import SweepRunner
from backend.streams.models import MetricPoint
from backend.sweeps.models import Sweep, SweepTrial
from tests.conftest import Api
from tests.support.factories import make_sweep_spec


def runner_of(api: Api) -> SweepRunner:
    runner: SweepRunner = api.app.state.sweeps  # type: ignore[attr-defined]
    return runner


@pytest.fixture
def sweeps_api(quiet_api: Api) -> Api:
    """The app with its sweep loop idle (as a follower's): iterations run when a test says."""
    runner_of(quiet_api).leading = lambda: False
    return quiet_api


async def trials(api: Api, sweep_id: int) -> list[dict[str, Any]]:
    answer = await api.http.get(f"/sweeps/{sweep_id}")
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["trials"]
    return found


async def report(api: Api, job_id: int, epoch: int, value: float, seq: int) -> None:
    """An epoch end as the runtime streams it: the metric and `epoch`, at the same step."""
    step = epoch * 10
    async with api.session() as session:
        await session.execute(
            insert(MetricPoint),
            [
                {
                    "job_id": job_id,
                    "task": "chief:0",
                    "attempt": 0,
                    "seq": seq,
                    "name": "val_loss",
                    "step": step,
                    "value": value,
                    "wall_time": 0.0,
                },
                {
                    "job_id": job_id,
                    "task": "chief:0",
                    "attempt": 0,
                    "seq": seq + 1,
                    "name": "epoch",
                    "step": step,
                    "value": float(epoch),
                    "wall_time": 0.0,
                },
            ],
        )
        await session.commit()


async def end_job(api: Api, job_id: int, status: JobStatus, reason: str | None = None) -> None:
    """End a trial's job as its agents' reports would, again if a controller pass wrote the
    job meanwhile (its version moved on)."""
    for _ in range(20):
        try:
            async with api.session() as session:
                job = await session.get_one(Job, job_id)
                job.status = status
                job.reason = reason
                await session.commit()
                return
        except StaleDataError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} kept changing")


async def test_a_sweep_is_validated_field_by_field(sweeps_api: Api) -> None:
    bad = make_sweep_spec(budget={"trials": 2, "parallel": 3})
    bad["parameters"]["lr"] = {"type": "float", "low": -1, "high": 0.1, "log": True}
    bad["job"]["replicas"] = {"chief": {"count": 2}}
    answer = await sweeps_api.http.post("/sweeps", json=bad)
    assert answer.status_code == 422
    fields = {issue["field"] for issue in answer.json()["errors"]}
    assert fields == {"parameters.lr"}  # field errors come first, alone
    bad["parameters"]["lr"] = {"type": "float", "low": 0.1, "high": 0.2}
    answer = await sweeps_api.http.post("/sweeps", json=bad)
    fields = {issue["field"] for issue in answer.json()["errors"]}
    assert fields == {"budget.parallel"}
    bad["budget"] = {"trials": 2}
    answer = await sweeps_api.http.post("/sweeps", json=bad)
    assert [i["field"] for i in answer.json()["errors"]] == ["job.replicas"]


async def test_trials_run_as_jobs_and_asha_prunes_one(sweeps_api: Api) -> None:
    api = sweeps_api
    answer = await api.http.post("/sweeps", json=make_sweep_spec())
    assert answer.status_code == 201, answer.text
    sweep_id = answer.json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    first = await trials(api, sweep_id)
    assert [t["number"] for t in first] == [0, 1]
    assert all(t["status"] == "running" and t["job_status"] == "pending" for t in first)
    async with api.session() as session:
        job = await session.get_one(Job, first[0]["job_id"])
        assert job.spec["entrypoint"][-1] == repr(first[0]["params"]["lr"]).replace("'", "")
        assert job.spec["env"]["UNITS"] == str(first[0]["params"]["units"])
        assert f"sweep-{sweep_id}" in job.spec["tags"]
    # Trial 0 reaches epoch 1 first with a good value; trial 1 then a worse one: ASHA
    # (reduction factor 2) keeps the best half at rung 0, and stops trial 1 there.
    await report(api, first[0]["job_id"], 1, 0.5, seq=0)
    await runner.run_once()
    await report(api, first[1]["job_id"], 1, 0.9, seq=0)
    await runner.run_once()
    now = {t["number"]: t for t in await trials(api, sweep_id)}
    assert now[1]["status"] == "pruned"
    assert now[1]["reason"] == "pruned at epoch 1: ASHA rung 0"
    assert now[1]["job_status"] == "cancelled"
    assert now[1]["curve"] == [[1.0, 0.9]]
    async with api.session() as session:
        job = await session.get_one(Job, now[1]["job_id"])
        assert job.reason == "pruned at epoch 1: ASHA rung 0"
    # In its place trial 2 started: two run at a time.
    assert now[2]["status"] == "running"
    assert sum(t["status"] == "running" for t in now.values()) == 2


async def test_a_stop_cancels_running_trials_and_starts_none(sweeps_api: Api) -> None:
    api = sweeps_api
    sweep_id = (await api.http.post("/sweeps", json=make_sweep_spec())).json()["id"]
    await runner_of(api).run_once()
    stopped = await api.http.post(f"/sweeps/{sweep_id}/stop", json={"reason": "enough"})
    assert stopped.status_code == 200 and stopped.json()["status"] == "stopping"
    await runner_of(api).run_once()
    read = (await api.http.get(f"/sweeps/{sweep_id}")).json()
    assert read["status"] == "stopped" and read["reason"] == "enough"
    assert [t["status"] for t in read["trials"]] == ["stopped", "stopped"]
    assert {t["job_status"] for t in read["trials"]} == {"cancelled"}
    again = await api.http.post(f"/sweeps/{sweep_id}/stop")
    assert again.status_code == 409


async def test_a_finished_budget_names_the_best_trial(sweeps_api: Api) -> None:
    api = sweeps_api
    doc = make_sweep_spec(budget={"trials": 2, "parallel": 2}, early_stopping={"type": "none"})
    sweep_id = (await api.http.post("/sweeps", json=doc)).json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    first = await trials(api, sweep_id)
    for seq, (trial, value) in enumerate(zip(first, (0.3, 0.2), strict=True)):
        await report(api, trial["job_id"], 1, value, seq=seq * 2)
        await end_job(api, trial["job_id"], JobStatus.succeeded)
    await runner.run_once()
    read = (await api.http.get(f"/sweeps/{sweep_id}")).json()
    assert read["status"] == "succeeded", read
    assert read["best"]["number"] == 1 and read["best"]["value"] == 0.2
    assert read["counts"]["succeeded"] == 2
    assert read["reason"].startswith("best: trial 1, val_loss 0.2")
    listed = (await api.http.get("/sweeps")).json()
    assert [s["id"] for s in listed] == [sweep_id]
    async with api.session() as session:
        rows = list(await session.scalars(select(SweepTrial.status)))
    assert len(rows) == 2
    await asyncio.sleep(0)


def fresh_runner(api: Api) -> SweepRunner:
    """Another runner on the same database, as a restarted server's: nothing in memory."""
    old = runner_of(api)
    return SweepRunner(
        sessions=old.sessions,
        apply=old.apply,
        database_url=old.database_url,
        leading=lambda: True,
        poll_seconds=60,
    )


async def test_a_trial_asked_for_before_a_crash_is_started_after_it(sweeps_api: Api) -> None:
    api = sweeps_api
    doc = make_sweep_spec(budget={"trials": 3, "parallel": 2})
    sweep_id = (await api.http.post("/sweeps", json=doc)).json()["id"]
    # The server asked Optuna for trial 0 and died before its job was written.
    runner = fresh_runner(api)
    async with api.session() as session:
        stored = await session.get_one(Sweep, sweep_id)
        study = await runner._study(stored, stored.sweep_spec)
    asked = await asyncio.to_thread(study.ask)
    assert asked.number == 0
    await fresh_runner(api).run_once()  # the restarted server
    found = await trials(api, sweep_id)
    assert [t["number"] for t in found] == [0, 1]
    assert found[0]["params"] == asked.params
    assert await asyncio.to_thread(study.counted) == 2  # nothing asked twice
    # Once these end, the last of the budget starts, and no more.
    for trial in found:
        await end_job(api, trial["job_id"], JobStatus.failed, "exit 3")
    await fresh_runner(api).run_once()
    found = await trials(api, sweep_id)
    assert [t["status"] for t in found] == ["failed", "failed", "running"]
    assert found[0]["reason"] == "its job failed: exit 3"
    assert await asyncio.to_thread(study.counted) == 3


async def test_more_failures_than_allowed_end_the_sweep_with_the_reason(sweeps_api: Api) -> None:
    api = sweeps_api
    doc = make_sweep_spec(budget={"trials": 4, "parallel": 2, "max_failed": 1})
    sweep_id = (await api.http.post("/sweeps", json=doc)).json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    first = await trials(api, sweep_id)
    for trial in first:
        await end_job(api, trial["job_id"], JobStatus.succeeded)  # it never reported val_loss
    await runner.run_once()
    read = (await api.http.get(f"/sweeps/{sweep_id}")).json()
    assert read["status"] == "failed", read
    assert read["reason"] == (
        "too many trials failed: 2, over budget.max_failed 1; the last, trial 1: "
        "its job never reported val_loss"
    )
    assert len(read["trials"]) == 2  # no trial started after


async def test_the_median_rule_names_itself(sweeps_api: Api) -> None:
    api = sweeps_api
    doc = make_sweep_spec(
        budget={"trials": 3, "parallel": 3},
        early_stopping={"type": "median", "startup_trials": 0, "min_resource": 1},
    )
    sweep_id = (await api.http.post("/sweeps", json=doc)).json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    first = await trials(api, sweep_id)
    # Trial 0 completes at 0.2; the median rule compares with completed trials only.
    await report(api, first[0]["job_id"], 1, 0.2, seq=0)
    await end_job(api, first[0]["job_id"], JobStatus.succeeded)
    await runner.run_once()
    await report(api, first[1]["job_id"], 1, 0.8, seq=0)
    await runner.run_once()
    now = {t["number"]: t for t in await trials(api, sweep_id)}
    assert now[0]["status"] == "succeeded" and now[0]["value"] == 0.2
    assert now[1]["status"] == "pruned"
    assert now[1]["reason"] == "pruned at epoch 1: worse than the median of completed trials"
    assert now[2]["status"] == "running"


async def test_a_sweep_past_its_wall_time_stops_with_what_it_found(sweeps_api: Api) -> None:
    api = sweeps_api
    doc = make_sweep_spec(budget={"trials": 4, "parallel": 2, "wall_time": 60})
    sweep_id = (await api.http.post("/sweeps", json=doc)).json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    assert len(await trials(api, sweep_id)) == 2
    async with api.session() as session:  # a minute later
        began = utcnow() - timedelta(seconds=61)
        await session.execute(update(Sweep).where(Sweep.id == sweep_id).values(created_at=began))
        await session.commit()
    await runner.run_once()
    read = (await api.http.get(f"/sweeps/{sweep_id}")).json()
    assert read["status"] == "stopped" and read["reason"] == "its wall time of 60 s ran out"
    assert [(t["status"], t["job_status"]) for t in read["trials"]] == [
        ("stopped", "cancelled")
    ] * 2


async def test_hyperband_reports_and_completes_trials(sweeps_api: Api) -> None:
    api = sweeps_api
    doc = make_sweep_spec(
        budget={"trials": 2, "parallel": 2},
        early_stopping={"type": "hyperband", "min_resource": 1, "max_resource": 3},
    )
    sweep_id = (await api.http.post("/sweeps", json=doc)).json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    first = await trials(api, sweep_id)
    for trial in first:
        for epoch in (1, 2, 3):
            await report(api, trial["job_id"], epoch, 1.0 / epoch, seq=2 * epoch)
        await end_job(api, trial["job_id"], JobStatus.succeeded)
    await runner.run_once()
    read = (await api.http.get(f"/sweeps/{sweep_id}")).json()
    # A job that ran to its end is not pruned after it: both completed, with their curves.
    assert read["status"] == "succeeded", read
    assert [t["curve"] for t in read["trials"]] == [[[1.0, 1.0], [2.0, 0.5], [3.0, 1 / 3]]] * 2
    assert [t["value"] for t in read["trials"]] == [1 / 3, 1 / 3]


async def test_a_trial_that_reached_max_resource_is_not_judged_but_done(sweeps_api: Api) -> None:
    api = sweeps_api
    stopping = {"type": "asha", "min_resource": 1, "max_resource": 1, "reduction_factor": 2}
    doc = make_sweep_spec(early_stopping=stopping)
    sweep_id = (await api.http.post("/sweeps", json=doc)).json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    first = await trials(api, sweep_id)
    await report(api, first[0]["job_id"], 1, 0.5, seq=0)
    await runner.run_once()
    await report(api, first[1]["job_id"], 1, 0.9, seq=0)  # worse, but at its full resource
    await runner.run_once()
    now = await trials(api, sweep_id)
    # Both ran to their end: their results are known, and two more trials take their places
    # while their jobs finish on their own.
    assert [t["status"] for t in now] == ["succeeded", "succeeded", "running", "running"]
    assert [t["value"] for t in now[:2]] == [0.5, 0.9]
    assert [t["job_status"] for t in now[:2]] == ["pending", "pending"]  # not cancelled


async def test_an_epoch_stored_for_a_running_trial_wakes_the_runner(sweeps_api: Api) -> None:
    api = sweeps_api
    sweep_id = (await api.http.post("/sweeps", json=make_sweep_spec())).json()["id"]
    runner = runner_of(api)
    await runner.run_once()
    job_id = (await trials(api, sweep_id))[0]["job_id"]
    ingestor = api.app.state.ingestor  # type: ignore[attr-defined]
    woken: list[None] = []
    runner.wake = lambda: woken.append(None)  # type: ignore[method-assign]
    loss = WirePoint(seq=0, name="loss", step=5, value=0.9, wall_time=0.0)
    await ingestor.submit((job_id, "chief:0", 0), [loss])
    assert woken == []  # a step's loss is nothing to judge
    epoch = WirePoint(seq=1, name="epoch", step=10, value=1.0, wall_time=0.0)
    await ingestor.submit((job_id, "chief:0", 0), [epoch])
    assert woken == [None]
