"""Fuzzing the REST API against its own OpenAPI schema (schemathesis, in process over ASGI).

Every operation in the schema is called with generated requests, valid ones (positive) and
ones the schema says are invalid (negative), as the admin, on a database seeded with hosts,
jobs, checkpoints, metrics and logs so that requests on existing ids reach the handlers and
not only the 404 branch. Each answer must:

* not be a server error (5xx): bad input is the client's error, never a crash;
* have a status code the operation documents, with a body of the documented schema and
  media type (so the dashboard's generated types are true for errors too);
* reject negative input with a 4xx (negative_data_rejection).

Each case goes to the app on SQLite and to the app on PostgreSQL, seeded alike.

Excluded, with the reason:
* the websocket routes (agent, runtime and stream channels): they are not in OpenAPI;
* `positive_data_acceptance`: a body that fits the JobSpec schema can still break the
  cross-field strategy rules (e.g. parameter_server without a ps), which JSON Schema
  cannot state; the server rightly answers 422 with the rule that was broken.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.openapi import from_asgi
from schemathesis.python import asgi
from schemathesis.schemas import APIOperation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from agents.protocol import CheckpointSaved
from backend.app import create_app
from backend.checkpoints.service import record_checkpoint
from backend.jobs import queries
from backend.jobs.spec import validate_spec
from backend.streams.models import MetricPoint
from tests.conftest import ADMIN_TOKEN, Api, make_settings
from tests.support.factories import create_job, make_host, make_spec

pytestmark = pytest.mark.slow  # hundreds of generated requests per operation

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
EXAMPLES_PER_OPERATION = 30
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _seed(app: Any) -> list[int]:
    """Two hosts, a job of each strategy, a checkpoint, metric points and log lines."""
    async with app.router.lifespan_context(app):
        async with app.state.sessions() as session:
            await make_host(session, "host-a", gpus=2)
            await make_host(session, "host-b", gpus=2)
            ids = []
            for base in ("parameter_server", "multi_worker_mirrored", "mirrored"):
                job = await create_job(session=session, spec=validate_spec(make_spec(base)))
                ids.append(job.id)
            await session.flush()
            job = await queries.get_job(session=session, job_id=ids[0])
            await record_checkpoint(
                session=session,
                job=job,
                directory=app.state.settings.checkpoints / f"job-{ids[0]}",
                task="chief:0",
                saved=CheckpointSaved(
                    name="ckpt-1",
                    step=10,
                    epoch=1,
                    size_bytes=1024,
                    wall_time=1.7e9,
                    trigger="epoch",
                    metrics={"loss": 0.5, "accuracy": float("nan")},
                ),
            )
            session.add_all(
                MetricPoint(
                    job_id=ids[0],
                    task="chief:0",
                    attempt=0,
                    seq=seq,
                    name="loss",
                    step=seq,
                    value=1.0 / (seq + 1),
                    wall_time=1.7e9 + seq,
                )
                for seq in range(20)
            )
            await session.commit()
        app.state.logs.append(ids[0], "chief:0", 0, 0, ["line one", "line two"])
    return ids


@pytest.fixture
def seeded_apps(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[dict[str, Any], list[int]]]:
    """The app on SQLite and on PostgreSQL, each seeded alike: every generated case is sent to
    both (Hypothesis draws the cases once, which is half the fuzzer's time)."""
    sqlite = tmp_path / "strata.db"
    shutil.copyfile(request.getfixturevalue("migrated_sqlite"), sqlite)
    urls = {"sqlite": f"sqlite:///{sqlite}", "postgresql": request.getfixturevalue("postgres_url")}
    apps = {name: create_app(make_settings(url, tmp_path / name)) for name, url in urls.items()}
    try:
        ids = {name: asyncio.run(_seed(app)) for name, app in apps.items()}
        # A case's job ids must name the same rows on both databases.
        assert ids["sqlite"] == ids["postgresql"], ids
        yield apps, ids["sqlite"]
    finally:
        # schemathesis keeps an app's lifespan running for the process; end these here.
        asgi.shutdown_lifespans()


def _strategy(
    operation: APIOperation[Any, Any, Any, Any], mode: GenerationMode, job_ids: list[int]
) -> Any:
    """Cases for one operation; those with a job id also go to the seeded jobs."""
    free = operation.as_strategy(generation_mode=mode)
    names = {parameter.name for parameter in operation.path_parameters}
    if "job_id" not in names:
        return free
    fixed: list[Any] = []
    for job_id in job_ids:
        path: dict[str, Any] = {"job_id": job_id}
        if "task" in names:
            path["task"] = "chief:0"
        fixed.append(operation.as_strategy(generation_mode=mode, path_parameters=path))
    return st.one_of(free, *fixed)


def _headers(case: Case[Any]) -> dict[str, str] | None:
    """The admin token, unless the case means to send bad headers (a missing or wrong token,
    answered 401): adding the token then would make the request valid behind its back."""
    components = case.meta.components if case.meta is not None else {}
    negative = any(
        location.value == "header" and info.mode.is_negative
        for location, info in components.items()
    )
    return None if negative else HEADERS


def _run(
    operation: APIOperation[Any, Any, Any, Any],
    mode: GenerationMode,
    job_ids: list[int],
    apps: dict[str, Any],
) -> None:
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,  # the same cases on every run: a finding is never a fluke
        suppress_health_check=list(HealthCheck),
    )
    @given(case=_strategy(operation, mode, job_ids))
    def fuzz(case: Case[Any]) -> None:
        for database, app in apps.items():
            try:
                case.call_and_validate(headers=_headers(case), checks=CHECKS, app=app)
            except Exception as exc:
                exc.add_note(f"on {database}")
                raise

    fuzz()


@pytest.mark.postgres
def test_every_operation_answers_as_its_schema_says_on_both_databases(
    seeded_apps: tuple[dict[str, Any], list[int]],
) -> None:
    apps, job_ids = seeded_apps
    schema = from_asgi("/openapi.json", apps["sqlite"])
    # An Err (a part of the schema schemathesis cannot read) has no ok(): the test fails here.
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    labels = {operation.label for operation in operations}
    # The whole REST surface is fuzzed: a new route joins this test by being in the schema.
    assert "POST /jobs" in labels and "GET /jobs/{job_id}/tasks/{task}/logs" in labels
    assert len(operations) >= 14
    failures: list[str] = []
    for operation in operations:
        modes = [GenerationMode.POSITIVE]
        # Negative cases need something to break: a parameter, a body or the bearer token.
        # (GET /healthz takes nothing and needs no token, so it has no invalid request.)
        if (
            list(operation.iter_parameters())
            or operation.body
            or operation.definition.raw.get("security")
        ):
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:
            try:
                _run(operation, mode, job_ids, apps)
            except (Exception, BaseExceptionGroup) as exc:  # collect all: each finding shows
                notes = " ".join(getattr(exc, "__notes__", []))  # the database, the example
                failures.append(f"{operation.label} ({mode.value}): {exc} {notes}")
    assert not failures, "\n\n".join(failures)


# Each finding of the fuzzer, kept as a plain regression test.


async def test_findings_stay_fixed(api: Api) -> None:
    job = (await api.http.post("/jobs", json=make_spec())).json()
    # A JSON body that is not UTF-8 was a bare 400 the schema did not declare.
    response = await api.http.post(
        f"/jobs/{job['id']}/evaluator",
        content=b'{"action": "\xff"}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {"field": "", "message": "the body is not valid UTF-8 (JSON must be UTF-8)"}
    ]
    # A job id over 32 bits overflowed the PostgreSQL driver (500).
    response = await api.http.get(f"/jobs/{2**31}")
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "job_id"
    # A NUL byte in a metric name or job name filter reached PostgreSQL (500).
    response = await api.http.get(f"/jobs/{job['id']}/metrics", params={"names": "lo\x00ss"})
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "names.0"
    response = await api.http.get("/jobs", params={"name": "a\x00"})
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "name"
    # Unknown query parameters were silently ignored.
    response = await api.http.get("/jobs", params={"stauts": "running"})
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {
            "field": "stauts",
            "message": "unknown query parameter;"
            " expected one of: limit, name, offset, project, q, status, tag",
        }
    ]
    # 401 and 403 were answered but not declared; 422 bodies were declared in FastAPI's shape.
    schema = (await api.http.get("/openapi.json")).json()
    read_job = schema["paths"]["/jobs/{job_id}"]["get"]["responses"]
    assert set(read_job) == {"200", "401", "403", "404", "422"}
    assert read_job["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/InvalidInputBody"
    }
    assert "HTTPValidationError" not in schema["components"]["schemas"]
