"""Job agent tokens on the agent channel and elsewhere, without a Slurm cluster: the refusals
that need no word from Slurm (the server's settings, the agent's name, the job's record)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from agents.protocol import Hello, Refused, server_message
from backend.app import create_app
from tests.conftest import ADMIN_TOKEN, make_settings
from tests.support.factories import make_spec

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def app_client(tmp_path: Path, **settings: object) -> TestClient:
    return TestClient(
        create_app(
            make_settings(f"sqlite:///{tmp_path / 'strata.db'}", tmp_path / "data", **settings)
        )
    )


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[TestClient]:
    with app_client(tmp_path) as client:
        yield client


@pytest.fixture
def with_slurm(tmp_path: Path) -> Iterator[TestClient]:
    # Enabled, with no Slurm to reach: every refusal here is decided before asking it.
    with app_client(
        tmp_path,
        slurm_enabled=True,
        slurm_bin_dir=tmp_path / "no-slurm-here",
        slurm_poll_seconds=3600.0,
    ) as client:
        yield client


def refusal(client: TestClient, token: str, name: str) -> str:
    """What the agent channel answers a hello under this name with this token."""
    hello = Hello(
        name=name,
        address="10.1.2.3",
        port_range=(50000, 50009),
        devices=[],
        version="test",
        identity="identity-of-a-job-agent",
    )
    with client.websocket_connect(
        "/agents/connect", headers={"Authorization": f"Bearer {token}"}
    ) as ws:
        ws.send_text(hello.model_dump_json())
        answer = server_message.validate_json(ws.receive_text())
        assert isinstance(answer, Refused), answer
        with pytest.raises(WebSocketDisconnect):
            ws.receive_text()
        return answer.reason


def job_agent_token(client: TestClient, job_id: int) -> str:
    token: str = client.app.state.tokens.job_agent_token(job_id)  # type: ignore[attr-defined]
    return token


def test_a_server_without_slurm_refuses_job_agents(plain: TestClient) -> None:
    job = plain.post("/jobs", json=make_spec("mirrored"), headers=ADMIN).json()
    token = job_agent_token(plain, job["id"])
    assert refusal(plain, token, f"strata-{job['id']}-n1") == "this server runs no Slurm backend"


def test_a_job_agent_must_carry_a_name_of_its_allocation(with_slurm: TestClient) -> None:
    token = job_agent_token(with_slurm, 7)
    assert refusal(with_slurm, token, "gpu-host-3") == (
        "an agent of job 7's Slurm allocation is named strata-7-<node>, not 'gpu-host-3'"
    )
    assert refusal(with_slurm, token, "strata-8-n1").endswith("not 'strata-8-n1'")


def test_a_job_agent_of_a_job_without_a_slurm_job_is_refused(with_slurm: TestClient) -> None:
    job = with_slurm.post("/jobs", json=make_spec("mirrored"), headers=ADMIN).json()
    token = job_agent_token(with_slurm, job["id"])
    reason = refusal(with_slurm, token, f"strata-{job['id']}-n1")
    assert reason == f"job {job['id']} has no Slurm job"


def test_a_job_agent_token_opens_no_route(plain: TestClient) -> None:
    token = job_agent_token(plain, 1)
    for path in ("/jobs", "/hosts", "/cluster"):
        answer = plain.get(path, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 403, (path, answer.text)
        assert "a token of kind job_agent was given" in answer.text


def _bundle(client: TestClient, text: str) -> str:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        member = tarfile.TarInfo("train.py")
        member.size = len(text.encode())
        tar.addfile(member, io.BytesIO(text.encode()))
    body = raw.getvalue()
    sha = hashlib.sha256(body).hexdigest()
    assert client.put(f"/code/{sha}", content=body, headers=ADMIN).status_code == 201
    return sha


def test_a_job_agent_fetches_its_own_jobs_code_bundle_and_no_other(plain: TestClient) -> None:
    mine, other = _bundle(plain, "print('mine')\n"), _bundle(plain, "print('other')\n")
    spec = {**make_spec("mirrored"), "code": {"sha256": mine}}
    job = plain.post("/jobs", json=spec, headers=ADMIN).json()
    token = {"Authorization": f"Bearer {job_agent_token(plain, job['id'])}"}
    fetched = plain.get(f"/code/{mine}", headers=token)
    assert fetched.status_code == 200 and hashlib.sha256(fetched.content).hexdigest() == mine
    refused = plain.get(f"/code/{other}", headers=token)
    assert refused.status_code == 403
    assert "only its own job's code bundle" in refused.json()["detail"]
