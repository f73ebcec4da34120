"""The audit trail: every change made through the API is recorded with who, what and from
where, in the change's own transaction (a refused change leaves nothing); the job's events
name who caused them; `GET /audit` filters, pages, and shows each reader only what they may
see. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from backend.db import utcnow
from backend.jobs.states import JobStatus
from backend.teams.models import Project, ProjectMember, User
from backend.teams.roles import ProjectRole
from backend.tokens.models import ApiToken
from backend.tokens.service import PREFIX, token_hash
from tests.backend.jobs.test_job_actions import arranged, connected_host
from tests.conftest import ADMIN_TOKEN, Api, make_settings, serving
from tests.support.factories import make_host, make_spec

ADMIN = "admin token (from the server's settings)"  # Principal.label of the server's token
FROM = ("10.1.2.3", 4711)  # the client's address as the server sees it


@pytest.fixture
async def api(database_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    """As the shared `api`, but its host is never lost: the stand-in agent of
    `connected_host` sends no heartbeats, and a loaded machine can take longer than the
    default timeout between the host's making and the last request."""
    settings = make_settings(database_url, tmp_path / "data", heartbeat_timeout_seconds=3600.0)
    async with serving(settings) as served:
        yield served


@pytest.fixture
async def remote(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    """The same app, called from another address (the audit trail's `source`)."""
    transport = httpx.ASGITransport(app=api.app, client=FROM)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://strata.test",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    ) as http:
        yield http


async def audit(http: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    answer = await http.get("/audit", params=params)
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


async def actions(http: httpx.AsyncClient, **params: Any) -> list[str]:
    return [entry["action"] for entry in (await audit(http, **params))["items"]]


async def placed(api: Api) -> int:
    """A job the controller placed by itself (a GPU-less one on the GPU-less host)."""
    spec = make_spec("mirrored", replicas={"chief": {"count": 1, "gpus": 0}})
    answer = await api.http.post("/jobs", json=spec)
    assert answer.status_code == 201, answer.text
    job_id: int = answer.json()["id"]
    for _ in range(200):
        if (await api.http.get(f"/jobs/{job_id}")).json()["status"] == "scheduled":
            return job_id
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} was not placed")


async def test_every_change_to_a_job_is_recorded_with_who_what_and_where(
    api: Api, remote: httpx.AsyncClient
) -> None:
    await connected_host(api)
    job_id = await placed(api)  # submitted by the plain client
    for path, body in [
        (f"/jobs/{job_id}/tasks/chief:0/restart", None),
        (f"/jobs/{job_id}/evaluator", {"action": "start"}),
        (f"/jobs/{job_id}/restart", None),
        (f"/jobs/{job_id}/cancel", None),
    ]:
        answer = await remote.post(path, json=body)
        assert answer.status_code == 200, (path, answer.text)

    entries = (await audit(api.http))["items"]
    assert [e["action"] for e in entries] == [
        "job.cancel",
        "job.restart",
        "job.evaluator",
        "task.restart",
        "job.submit",
    ]
    assert {(e["actor"], e["job_id"], e["project"], e["token_id"]) for e in entries} == {
        (ADMIN, job_id, "default", None)
    }
    assert [e["source"] for e in entries] == [FROM[0]] * 4 + ["127.0.0.1"]
    assert entries[3]["target"] == "chief:0" and entries[2]["detail"] == {"action": "start"}
    assert entries[4]["detail"] == {"name": make_spec("mirrored")["name"]}

    # The job's events say who caused them; what the system did on its own names nobody.
    events = (await api.http.get(f"/jobs/{job_id}/events")).json()
    by_kind = {(e["kind"], e["to_status"]): e["actor"] for e in events}
    assert by_kind[("created", None)] == ADMIN
    assert by_kind[("status", "cancelled")] == ADMIN
    assert by_kind[("status", "scheduled")] is None, events  # placed by the controller
    job = (await api.http.get(f"/jobs/{job_id}")).json()
    assert job["status"] == "cancelled"


async def test_a_refused_change_leaves_no_entry(api: Api) -> None:
    await connected_host(api)
    job_id = await arranged(api, JobStatus.cancelled)
    refused = [
        ("/jobs/999999/cancel", None, 404),
        (f"/jobs/{job_id}/cancel", None, 409),
        (f"/jobs/{job_id}/tasks/chief:0/restart", None, 409),
        (f"/jobs/{job_id}/checkpoint", None, 409),
        ("/tokens/999999", "DELETE", 404),
    ]
    for path, method, code in refused:
        if method == "DELETE":
            answer = await api.http.delete(path)
        else:
            answer = await api.http.post(path, json=method)
        assert answer.status_code == code, (path, answer.text)
    bad_spec = await api.http.post("/jobs", json={**make_spec("mirrored"), "priority": 1000})
    assert bad_spec.status_code == 422
    assert await actions(api.http) == ["job.submit"]


async def test_tokens_made_and_revoked_are_recorded_without_their_secret(api: Api) -> None:
    created = (await api.http.post("/tokens", json={"name": "grafana", "kind": "viewer"})).json()
    assert (await api.http.delete(f"/tokens/{created['id']}")).status_code == 200
    entries = (await audit(api.http))["items"]
    assert [(e["action"], e["target"]) for e in entries] == [
        ("token.revoke", f"token {created['id']}"),
        ("token.create", f"token {created['id']}"),
    ]
    assert entries[1]["detail"] == {"name": "grafana", "kind": "viewer"}
    assert entries[1]["project"] is None
    assert created["token"] not in str(entries)


async def test_entries_filter_and_page_newest_first(api: Api) -> None:
    await connected_host(api)
    first = await arranged(api, JobStatus.running)
    second = await arranged(api, JobStatus.running)
    for job_id in (first, second):
        assert (await api.http.post(f"/jobs/{job_id}/cancel")).status_code == 200

    assert await actions(api.http, job=first) == ["job.cancel", "job.submit"]
    assert await actions(api.http, action="job.cancel", job=second) == ["job.cancel"]
    assert await actions(api.http, project="default", action="job.submit") == ["job.submit"] * 2
    assert await actions(api.http, actor="alice") == []
    assert len(await actions(api.http, actor=ADMIN)) == 4

    page = await audit(api.http, limit=3)
    assert [e["job_id"] for e in page["items"]] == [second, first, second]
    rest = await audit(api.http, limit=3, before=page["next_before"])
    assert [(e["action"], e["job_id"]) for e in rest["items"]] == [("job.submit", first)]
    assert rest["next_before"] is None

    unknown = await api.http.get("/audit", params={"project": "nowhere"})
    assert unknown.status_code == 404 and "nowhere" in unknown.json()["detail"]
    bad = await api.http.get("/audit", params={"action": "job.delete"})
    assert bad.status_code == 422


async def user_token(api: Api, name: str, roles: dict[str, ProjectRole]) -> str:
    """A user with these roles (projects made as needed) and a token of theirs."""
    secret = PREFIX + secrets.token_urlsafe(32)
    async with api.session() as session:
        user = User(name=name)
        session.add(user)
        await session.flush()
        for project_name, role in roles.items():
            project_id = await session.scalar(
                select(Project.id).where(Project.name == project_name)
            )
            if project_id is None:
                project = Project(name=project_name)
                session.add(project)
                await session.flush()
                project_id = project.id
            session.add(ProjectMember(project_id=project_id, user_id=user.id, role=role))
        session.add(
            ApiToken(
                name=name,
                kind="user",
                user_id=user.id,
                token_hash=token_hash(secret),
                prefix=secret[:12],
                created_at=utcnow(),
            )
        )
        await session.commit()
    return secret


async def test_project_admins_read_their_projects_entries_and_no_one_else_reads_any(
    api: Api,
) -> None:
    await connected_host(api)
    job_id = await arranged(api, JobStatus.running)  # in project default
    carol = await user_token(api, "carol", {"default": ProjectRole.admin})
    dave = await user_token(api, "dave", {"vision": ProjectRole.admin})
    erin = await user_token(api, "erin", {"default": ProjectRole.member})
    viewer = (await api.http.post("/tokens", json={"name": "v", "kind": "viewer"})).json()

    def as_(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    seen = (await api.http.get("/audit", headers=as_(carol))).json()["items"]
    assert [(e["action"], e["job_id"]) for e in seen] == [("job.submit", job_id)]
    # Another project's entries are not there, nor is that project named as existing.
    assert (await api.http.get("/audit", headers=as_(dave))).json()["items"] == []
    other = await api.http.get("/audit", params={"project": "default"}, headers=as_(dave))
    assert other.status_code == 404
    for token in (erin, viewer["token"]):
        refused = await api.http.get("/audit", headers=as_(token))
        assert refused.status_code == 403, refused.text
        assert "project admins" in refused.json()["detail"]


async def test_a_users_change_names_them_in_the_entry_and_the_jobs_events(api: Api) -> None:
    await connected_host(api)
    job_id = await placed(api)  # in project default
    erin = await user_token(api, "erin", {"default": ProjectRole.member})
    headers = {"Authorization": f"Bearer {erin}"}
    async with api.session() as session:
        token_id = await session.scalar(select(ApiToken.id).where(ApiToken.name == "erin"))
        user_id = await session.scalar(select(User.id).where(User.name == "erin"))

    assert (await api.http.post(f"/jobs/{job_id}/cancel", headers=headers)).status_code == 200

    (entry,) = (await audit(api.http, action="job.cancel"))["items"]
    assert (entry["actor"], entry["user_id"], entry["token_id"]) == ("erin", user_id, token_id)
    assert (entry["project"], entry["job_id"]) == ("default", job_id)
    events = (await api.http.get(f"/jobs/{job_id}/events")).json()
    assert [e["actor"] for e in events if e["to_status"] == "cancelled"] == ["erin"]


async def test_forgetting_a_host_is_recorded_and_a_refused_forget_is_not(api: Api) -> None:
    async with api.session() as session:
        await make_host(session, "gone-host")
        await session.commit()
    assert (await api.http.delete("/hosts/gone-host")).status_code == 200
    assert (await api.http.delete("/hosts/no-such-host")).status_code == 404
    (entry,) = (await audit(api.http))["items"]
    assert (entry["action"], entry["target"], entry["actor"]) == (
        "host.forget",
        "host gone-host",
        ADMIN,
    )
