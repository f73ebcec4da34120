"""The jobs API on a real database: submit, read, list, cancel, and bad input."""

from __future__ import annotations

import json

import pytest
import yaml
from sqlalchemy import select

from backend.db import utcnow
from backend.jobs import queries
from backend.jobs.models import Task
from backend.jobs.states import TaskStatus
from tests.conftest import Api
from tests.support.factories import make_host, make_spec


async def test_submit_json_returns_the_job_with_pending_tasks(api: Api) -> None:
    response = await api.http.post("/jobs", json=make_spec())
    assert response.status_code == 201
    job = response.json()
    assert job["status"] == "pending"
    assert job["reason"] == "waiting to be placed"
    assert job["spec"]["replicas"]["worker"]["count"] == 2
    assert [t["name"] for t in job["tasks"]] == ["chief:0", "worker:0", "worker:1", "ps:0"]
    assert all(t["status"] == "pending" and t["attempt"] == 0 for t in job["tasks"])
    assert all(t["host"] is None and t["port"] is None for t in job["tasks"])


async def test_submit_yaml_is_the_same_as_json(api: Api) -> None:
    body = yaml.safe_dump(make_spec("multi_worker_mirrored"))
    response = await api.http.post(
        "/jobs", content=body, headers={"Content-Type": "application/yaml"}
    )
    assert response.status_code == 201
    assert response.json()["strategy"] == "multi_worker_mirrored"
    assert [t["name"] for t in response.json()["tasks"]] == ["worker:0", "worker:1"]


async def test_example_spec_file_is_accepted(api: Api) -> None:
    with open("examples/digits_ps.yaml", "rb") as handle:
        response = await api.http.post(
            "/jobs", content=handle.read(), headers={"Content-Type": "application/yaml"}
        )
    assert response.status_code == 201, response.text


async def test_read_job_and_unknown_job(api: Api) -> None:
    created = (await api.http.post("/jobs", json=make_spec())).json()
    fetched = await api.http.get(f"/jobs/{created['id']}")
    assert fetched.status_code == 200
    # A controller pass may have examined the job in between: then its reason says why it
    # waits, and it was updated; the rest is what was created.
    read = fetched.json()
    examined = ("reason", "updated_at")
    assert {k: v for k, v in read.items() if k not in examined} == {
        k: v for k, v in created.items() if k not in examined
    }
    assert read["reason"] in (created["reason"], "no online hosts; waiting for an agent to join")
    assert read["updated_at"] >= created["updated_at"]
    missing = await api.http.get("/jobs/999999")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "job 999999 does not exist"}


@pytest.mark.parametrize("job_id", ["abc", "0", "-1", str(2**64)])
async def test_malformed_job_ids_are_422_naming_the_parameter(api: Api, job_id: str) -> None:
    response = await api.http.get(f"/jobs/{job_id}")
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "job_id"


async def test_bad_spec_is_422_with_field_errors_and_nothing_stored(api: Api) -> None:
    bad = make_spec(replicas={"chief": {"count": 1}, "worker": {"count": 2}})
    response = await api.http.post("/jobs", json=bad)
    assert response.status_code == 422
    assert response.json() == {
        "detail": "replicas.ps.count: parameter_server needs at least one ps",
        "errors": [
            {"field": "replicas.ps.count", "message": "parameter_server needs at least one ps"}
        ],
    }
    assert (await api.http.get("/jobs")).json()["total"] == 0


@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        (b"{broken", "application/json", 422, "not valid JSON"),
        (b"- a\n- list\n", "application/yaml", 422, "must be a mapping"),
        (b"", "application/json", 422, "not valid JSON"),
        (
            b"name=x",
            "application/x-www-form-urlencoded",
            415,
            "application/json or application/yaml",
        ),
    ],
)
async def test_unusable_bodies(
    api: Api, body: bytes, content_type: str, status: int, words: str
) -> None:
    response = await api.http.post("/jobs", content=body, headers={"Content-Type": content_type})
    assert response.status_code == status
    assert words in response.json()["detail"]


async def test_oversized_body_is_413(api: Api) -> None:
    spec = make_spec(env={f"V{i}": "x" * 8000 for i in range(200)})
    response = await api.http.post("/jobs", content=json.dumps(spec))
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]


async def test_pagination_and_filters(api: Api) -> None:
    ids = [
        (await api.http.post("/jobs", json=make_spec(name=f"job-{i}"))).json()["id"]
        for i in range(7)
    ]
    first = (await api.http.get("/jobs", params={"limit": 3})).json()
    assert (first["total"], first["limit"], first["offset"]) == (7, 3, 0)
    assert [j["id"] for j in first["items"]] == ids[::-1][:3]  # newest first
    last = (await api.http.get("/jobs", params={"limit": 3, "offset": 6})).json()
    assert [j["id"] for j in last["items"]] == [ids[0]]
    beyond = (await api.http.get("/jobs", params={"limit": 3, "offset": 50})).json()
    assert beyond["items"] == [] and beyond["total"] == 7

    await api.http.post(f"/jobs/{ids[2]}/cancel")
    await api.http.post(f"/jobs/{ids[4]}/cancel")
    cancelled = (await api.http.get("/jobs", params={"status": "cancelled"})).json()
    assert sorted(j["id"] for j in cancelled["items"]) == [ids[2], ids[4]]
    both = await api.http.get("/jobs", params=[("status", "cancelled"), ("status", "pending")])
    assert both.json()["total"] == 7
    named = (await api.http.get("/jobs", params={"name": "job-3"})).json()
    assert [j["id"] for j in named["items"]] == [ids[3]]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"offset": -1}, "offset"),
        ({"status": "sleeping"}, "status.0"),
    ],
)
async def test_bad_list_parameters_are_422(
    api: Api, params: dict[str, int | str], field: str
) -> None:
    response = await api.http.get("/jobs", params=params)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == field


async def test_cancel_records_events_and_refuses_twice(api: Api) -> None:
    job = (await api.http.post("/jobs", json=make_spec())).json()
    cancelled = await api.http.post(f"/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["finished_at"] is not None

    again = await api.http.post(f"/jobs/{job['id']}/cancel")
    assert again.status_code == 409
    assert again.json()["detail"] == f"job {job['id']} is cancelled; it cannot become cancelled"

    events = (await api.http.get(f"/jobs/{job['id']}/events")).json()
    assert [(e["kind"], e["from_status"], e["to_status"]) for e in events] == [
        ("created", None, None),
        ("status", "pending", "cancelled"),
    ]
    later = await api.http.get(f"/jobs/{job['id']}/events", params={"after": events[0]["id"]})
    assert [e["to_status"] for e in later.json()] == ["cancelled"]


async def test_cancel_unknown_job_is_404(api: Api) -> None:
    assert (await api.http.post("/jobs/4242/cancel")).status_code == 404


async def test_openapi_documents_both_body_types(api: Api) -> None:
    schema = (await api.http.get("/openapi.json")).json()
    content = schema["paths"]["/jobs"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "application/yaml"}
    assert "JobSpec" in schema["components"]["schemas"]


@pytest.mark.parametrize("base", ["parameter_server", "mirrored"])
async def test_the_submit_answer_is_the_job_as_stored(api: Api, base: str) -> None:
    """POST /jobs answers from the job its transaction stored, without reading it back: the
    same view as reading it (but why it waits, which a controller pass may write since)."""
    answer = (await api.http.post("/jobs", json=make_spec(base))).json()
    read = (await api.http.get(f"/jobs/{answer['id']}")).json()
    changing = {"reason", "updated_at"}
    for view in (answer, read):
        for task in view["tasks"]:
            task.pop("stats", None)  # usage samples, which only the job's own route adds
    assert {k: v for k, v in answer.items() if k not in changing} == {
        k: v for k, v in read.items() if k not in changing
    }
    assert answer["tasks"] and all(t["status"] == "pending" for t in answer["tasks"])


async def test_a_listed_job_is_the_job_read_alone(api: Api) -> None:
    """The list and the job's own route read plain rows, the routes that change a job ORM
    objects: the same view every way, placed tasks (their host), exit codes and times
    included."""
    ids = [
        (await api.http.post("/jobs", json=make_spec(base))).json()["id"]
        for base in ("parameter_server", "mirrored")
    ]
    async with api.session() as session:
        host = await make_host(session, "host-list", gpus=4)
        tasks = list(
            await session.scalars(select(Task).where(Task.job_id == ids[0]).order_by(Task.id))
        )
        for n, task in enumerate(tasks):
            task.host_id, task.port, task.gpu_indices = host.id, 42000 + n, [n % 4]
            task.status, task.pid, task.started_at = TaskStatus.running, 100 + n, utcnow()
        tasks[-1].status, tasks[-1].exit_code, tasks[-1].finished_at = (
            TaskStatus.failed,
            3,
            utcnow(),
        )
        await session.commit()
    # A controller pass may write a job's reason (and so its update time) between two reads.
    apart = {"reason", "updated_at"}
    listed = {job["id"]: job for job in (await api.http.get("/jobs")).json()["items"]}
    for job_id in ids:
        alone = (await api.http.get(f"/jobs/{job_id}")).json()
        async with api.session() as session:
            loaded = queries.job_read(await queries.get_job(session=session, job_id=job_id))
        as_loaded = loaded.model_dump(mode="json")
        for view in (alone, listed[job_id], as_loaded):
            for key in apart:
                view.pop(key)
            for task in view["tasks"]:
                task.pop("stats", None)  # the job's own route adds usage samples
        assert listed[job_id] == alone == as_loaded
    placed = listed[ids[0]]["tasks"]
    assert {task["host"] for task in placed} == {"host-list"}
    assert placed[-1]["exit_code"] == 3 and placed[0]["pid"] == 100
