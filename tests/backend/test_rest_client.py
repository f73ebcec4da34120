"""StrataClient answers with the server's response models, against a real server process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backend.hosts.schemas import HostRead
from backend.jobs.schemas import JobEventRead, JobPage, JobRead
from backend.jobs.states import JobStatus, TaskStatus
from backend.rest_client import ClientError, StrataClient, UnexpectedAnswer
from backend.tokens.schemas import TokenCreated, TokenRead
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.factories import make_spec
from tests.support.processes import strata_server

TOKENS = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataClient]:
    with (
        strata_server(tmp_path_factory.mktemp("client") / "data", TOKENS) as url,
        StrataClient(url, ADMIN_TOKEN) as strata,
    ):
        yield strata


def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(make_spec()))
    return path


def test_jobs_come_back_as_models(client: StrataClient, tmp_path: Path) -> None:
    job = client.submit(spec_file(tmp_path))
    assert isinstance(job, JobRead) and job.status is JobStatus.pending
    assert job.spec.strategy == "parameter_server" and job.actions.cancel
    assert all(task.status is TaskStatus.pending for task in job.tasks)

    page = client.jobs(statuses=["pending"], limit=10)
    assert isinstance(page, JobPage) and job.id in [item.id for item in page.items]
    again = client.job(job.id)  # its reason may have changed meanwhile (placement tried)
    assert (again.id, again.spec, again.created_at) == (job.id, job.spec, job.created_at)

    started = client.evaluator(job.id, "start")
    assert {t.name: t.status for t in started.tasks}["evaluator:0"] is TaskStatus.pending
    assert client.checkpoints(job.id, include_deleted=True) == []

    cancelled = client.cancel(job.id)
    assert cancelled.status is JobStatus.cancelled and not cancelled.actions.cancel
    events = client.events(job.id)
    assert all(isinstance(event, JobEventRead) for event in events)
    assert events[0].kind == "created" and events[-1].to_status == "cancelled"


def test_refusals_are_client_errors(client: StrataClient, tmp_path: Path) -> None:
    job = client.submit(spec_file(tmp_path))
    with pytest.raises(ClientError) as refused:
        client.restart(job.id)
    assert refused.value.status_code == 409 and "pending" in refused.value.detail
    with pytest.raises(ClientError) as missing:
        client.job(99_999)
    assert missing.value.status_code == 404


def test_tokens_and_hosts_come_back_as_models(client: StrataClient) -> None:
    created = client.create_token("client-test", "viewer", None)
    assert isinstance(created, TokenCreated) and created.token.startswith("stk_")
    listed = client.tokens()
    assert all(isinstance(token, TokenRead) for token in listed)
    assert created.id in [token.id for token in listed]
    revoked = client.revoke_token(created.id)
    assert revoked.revoked_at is not None and not revoked.active
    hosts = client.hosts()
    assert isinstance(hosts, list) and all(isinstance(host, HostRead) for host in hosts)


def test_an_answer_that_is_not_the_declared_model_is_an_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=[{"name": "not-a-checkpoint"}])

    transport = httpx.MockTransport(answer)
    with (
        StrataClient("http://strata.test", "t", transport=transport) as strata,
        pytest.raises(UnexpectedAnswer) as unexpected,
    ):
        strata.checkpoints(1)
    assert isinstance(unexpected.value, ClientError)
    assert unexpected.value.detail == (
        "unexpected answer to GET /jobs/1/checkpoints: 0.id: Field required"
    )
