"""Projects and roles, enforced: every REST route and every stream, for each role in its own
project, the same users against another project's job, and revoked and expired user tokens.
No job of another project may be visible anywhere: list, read, events, logs, metrics,
checkpoints, TensorBoard, the job stream and the cluster stream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from starlette.websockets import WebSocketDisconnect

from backend.app import create_app
from backend.db import utcnow
from backend.jobs.spec import validate_spec
from backend.jobs.states import TaskStatus
from backend.teams import service as teams_service
from backend.tokens.models import ApiToken
from backend.tokens.service import token_hash
from tests.conftest import ADMIN_TOKEN, Api, make_settings
from tests.support.factories import create_job, make_host, make_spec, make_sweep_spec

PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/ui/"}
ROLES = ("viewer", "member", "admin")
SUBSCRIBE = json.dumps({"type": "subscribe", "cursor": None})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ADMIN = bearer(ADMIN_TOKEN)


@dataclass(frozen=True)
class Team:
    client: TestClient
    tokens: dict[str, str]  # by role in project vision (and "revoked", "expired")
    mine: int  # a job of project vision
    theirs: int  # a job of project nlp, in which no user here has a role


def ok(response: object, *codes: int) -> None:
    status = getattr(response, "status_code", None)
    assert status in codes, (status, getattr(response, "text", ""))


@pytest.fixture
def team(database_url: str, tmp_path: Path) -> Iterator[Team]:
    with TestClient(create_app(make_settings(database_url, tmp_path / "data"))) as client:
        for project in ("vision", "nlp"):
            ok(client.post("/projects", json={"name": project}, headers=ADMIN), 201)
        tokens = {}
        for role in ROLES:
            user = f"{role}-user"
            ok(client.post("/users", json={"name": user}, headers=ADMIN), 201)
            ok(
                client.put(f"/projects/vision/members/{user}", json={"role": role}, headers=ADMIN),
                200,
            )
            answer = client.post(f"/users/{user}/tokens", json={"name": "laptop"}, headers=ADMIN)
            ok(answer, 201)
            tokens[role] = answer.json()["token"]
        # A revoked and an expired token of the project's admin.
        revoked = client.post("/users/admin-user/tokens", json={"name": "old"}, headers=ADMIN)
        ok(client.delete(f"/tokens/{revoked.json()['id']}", headers=ADMIN), 200)
        tokens["revoked"] = revoked.json()["token"]
        expired = client.post(
            "/users/admin-user/tokens",
            json={"name": "short", "expires_in_seconds": 60},
            headers=ADMIN,
        ).json()["token"]

        async def expire() -> None:
            async with client.app.state.sessions() as session:  # type: ignore[attr-defined]
                await session.execute(
                    update(ApiToken)
                    .where(ApiToken.token_hash == token_hash(expired))
                    .values(expires_at=utcnow() - timedelta(seconds=1))
                )
                await session.commit()

        client.portal.call(expire)  # type: ignore[union-attr]
        tokens["expired"] = expired
        mine = client.post("/jobs", json=make_spec(project="vision"), headers=ADMIN)
        theirs = client.post("/jobs", json=make_spec(project="nlp"), headers=ADMIN)
        ok(mine, 201)
        ok(theirs, 201)
        yield Team(client, tokens, mine.json()["id"], theirs.json()["id"])


def fill(path: str, job_id: int, *, user: str, project: str) -> str:
    values = {
        "job_id": str(job_id),
        "task": "chief:0",
        "session": "1",
        "token_id": "999",
        "name": project,
        "user": user,
        "sha256": "0" * 64,
        "sweep_id": "999",
    }
    if path.startswith("/users/"):
        values["name"] = user
    return re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: values[m[1]], path)


def rest_routes(client: TestClient) -> list[tuple[str, str]]:
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    return [
        (method.upper(), path)
        for path, operations in paths.items()
        if path not in PUBLIC
        for method in operations
    ]


# What each role of project vision gets on the routes about no one job: None is "let in"
# (anything but 401, 403 and 404); a set is the statuses it must be one of. A route missing
# here fails the test, so that a new route is decided, not forgotten.
def expected_outside_jobs(method: str, path: str, role: str) -> set[int] | None:
    admin_only = {403}
    table: dict[tuple[str, str], set[int] | None] = {
        ("POST", "/jobs"): None,  # the body is checked first (422), the project after
        ("GET", "/jobs"): None,
        ("GET", "/hosts"): None,
        ("DELETE", "/hosts/{name}"): admin_only,
        ("POST", "/hosts/{name}/drain"): admin_only,  # a host serves every project
        ("DELETE", "/hosts/{name}/drain"): admin_only,
        ("POST", "/hosts/{name}/notice"): admin_only,
        ("POST", "/hosts/{name}/cordon"): admin_only,
        ("POST", "/hosts/{name}/uncordon"): admin_only,
        ("GET", "/cluster"): None,
        ("GET", "/replicas"): None,
        ("GET", "/metrics"): admin_only,  # Prometheus: every project's numbers
        ("POST", "/tokens"): admin_only,
        ("GET", "/tokens"): None,  # their own
        ("GET", "/tokens/self"): None,
        ("DELETE", "/tokens/{token_id}"): {404},  # token 999 is not theirs (nor anyone's)
        ("PUT", "/code/{sha256}"): None,
        ("HEAD", "/code/{sha256}"): {404},  # no such bundle, but they may ask
        ("GET", "/code/{sha256}"): {404},  # no such bundle, but they may ask
        ("GET", "/code/{sha256}/manifest"): {404},
        ("GET", "/me"): None,
        ("GET", "/users"): admin_only,
        ("POST", "/users"): admin_only,
        ("PATCH", "/users/{name}"): admin_only,  # not even to disable themselves
        ("POST", "/users/{name}/tokens"): None,  # for themselves
        ("GET", "/projects"): None,
        ("POST", "/projects"): admin_only,
        ("GET", "/projects/{name}"): None,
        ("PUT", "/projects/{name}/members/{user}"): None if role == "admin" else {403},
        ("DELETE", "/projects/{name}/members/{user}"): None if role == "admin" else {403},
        ("PUT", "/projects/{name}/quota"): admin_only,  # a project admin may not raise its own
        ("GET", "/audit"): None if role == "admin" else {403},
        ("POST", "/sweeps"): None,  # the body is checked first (422), the project after
        ("GET", "/sweeps"): None,
        ("GET", "/sweeps/{sweep_id}"): {404},  # sweep 999 does not exist
        ("POST", "/sweeps/{sweep_id}/stop"): {404},
    }
    return table[(method, path)]


def test_each_role_in_its_own_project_and_nothing_of_another(team: Team) -> None:
    client = team.client
    routes = rest_routes(client)
    assert len(routes) >= 30, routes
    problems = []
    for role in ROLES:
        headers = bearer(team.tokens[role])
        for method, path in routes:
            about_a_job = "{job_id}" in path
            if about_a_job:
                # Another project's job: exactly as if it did not exist.
                url = fill(path, team.theirs, user=f"{role}-user", project="vision")
                got = client.request(method, url, headers=headers, json={})
                if got.status_code != 404 or "does not exist" not in got.text:
                    problems.append(f"{method} {url} as {role}: {got.status_code} {got.text}")
                reads = method == "GET"
                allowed: set[int] | None = None if reads or role != "viewer" else {403}
                url = fill(path, team.mine, user=f"{role}-user", project="vision")
            else:
                allowed = expected_outside_jobs(method, path, role)
                # The project routes on project vision, the member routes on the user itself
                # (removing themselves comes last: see below).
                url = fill(path, 0, user=f"{role}-user", project="vision")
            if method == "DELETE" and "/members/" in path:
                continue
            got = client.request(method, url, headers=headers, json={})
            good = (
                got.status_code not in (401, 403, 404)
                if allowed is None
                else (got.status_code in allowed)
            )
            if not good:
                problems.append(f"{method} {url} as {role}: {got.status_code} {got.text[:200]}")
            # The same project routes on a project they are not in: it does not exist.
            if "{name}" in path and path.startswith("/projects/"):
                other = fill(path, 0, user=f"{role}-user", project="nlp")
                body = {} if path.endswith("/quota") else {"role": "viewer"}
                got = client.request(method, other, headers=headers, json=body)
                if got.status_code != 404:
                    problems.append(f"{method} {other} as {role}: {got.status_code}")
    assert not problems, "\n".join(problems)


def test_revoked_and_expired_user_tokens_are_refused_everywhere(team: Team) -> None:
    client = team.client
    for which in ("revoked", "expired"):
        headers = bearer(team.tokens[which])
        for method, path in rest_routes(client):
            url = fill(path, team.mine, user="admin-user", project="vision")
            got = client.request(method, url, headers=headers, json={})
            assert got.status_code == 401, (which, method, url, got.status_code)
        for path in (f"/jobs/{team.mine}/stream", "/stream"):
            with (
                pytest.raises(WebSocketDisconnect) as closed,
                client.websocket_connect(path, headers=headers) as ws,
            ):
                ws.send_text(SUBSCRIBE)
                ws.receive_text()
            assert closed.value.code == 1008 and "token" in closed.value.reason
        got = client.get(f"/jobs/{team.mine}/tensorboard/", headers=headers)
        assert got.status_code == 401


def test_lists_show_only_the_callers_projects(team: Team) -> None:
    client = team.client
    for role in ROLES:
        headers = bearer(team.tokens[role])
        listed = client.get("/jobs", headers=headers).json()
        assert [job["id"] for job in listed["items"]] == [team.mine]
        assert listed["total"] == 1
        only = client.get("/jobs", params={"project": "vision"}, headers=headers).json()
        assert [job["id"] for job in only["items"]] == [team.mine]
        other = client.get("/jobs", params={"project": "nlp"}, headers=headers)
        assert other.status_code == 404
        assert other.json()["detail"] == "no project named nlp"
        projects = client.get("/projects", headers=headers).json()
        assert [(p["name"], p["role"]) for p in projects] == [("vision", role)]
        me = client.get("/me", headers=headers).json()
        assert me["user"] == f"{role}-user" and me["kind"] == "user"
        assert [(p["name"], p["role"]) for p in me["projects"]] == [("vision", role)]
        assert me["default_project"] == "vision"
    # An admin token sees every project's jobs, and can ask for one project's.
    assert client.get("/jobs", headers=ADMIN).json()["total"] == 2
    nlp = client.get("/jobs", params={"project": "nlp"}, headers=ADMIN).json()
    assert [job["id"] for job in nlp["items"]] == [team.theirs]
    me = client.get("/me", headers=ADMIN).json()
    assert me["user"] is None and me["kind"] == "admin" and me["default_project"] == "default"
    assert {p["name"] for p in me["projects"]} == {"default", "vision", "nlp"}


def test_submitting_goes_to_a_project_the_user_may_submit_to(team: Team) -> None:
    client = team.client
    member, viewer = bearer(team.tokens["member"]), bearer(team.tokens["viewer"])
    made = client.post("/jobs", json=make_spec(), headers=member)  # the default project
    ok(made, 201)
    job = made.json()
    assert job["spec"]["project"] == "vision"
    assert job["submitted_by"] == "member-user"
    assert (
        client.get(f"/jobs/{job['id']}", headers=ADMIN).json()["project_id"]
        == (client.get(f"/jobs/{team.mine}", headers=ADMIN).json()["project_id"])
    )
    events = client.get(f"/jobs/{job['id']}/events", headers=member).json()
    assert events[0]["kind"] == "created"
    refused = client.post("/jobs", json=make_spec(project="nlp"), headers=member)
    assert (refused.status_code, refused.json()["detail"]) == (404, "no project named nlp")
    missing = client.post("/jobs", json=make_spec(project="nowhere"), headers=member)
    assert (missing.status_code, missing.json()["detail"]) == (404, "no project named nowhere")
    read_only = client.post("/jobs", json=make_spec(project="vision"), headers=viewer)
    assert read_only.status_code == 403
    assert "viewer-user is a viewer of project vision" in read_only.json()["detail"]
    # The bootstrap admin token submits where it is told, and to `default` otherwise.
    plain = client.post("/jobs", json=make_spec(), headers=ADMIN).json()
    assert plain["spec"]["project"] == "default"
    assert plain["submitted_by"] == "admin token (from the server's settings)"


def test_control_needs_a_member_and_viewer_is_told_why(team: Team) -> None:
    client = team.client
    answer = client.post(f"/jobs/{team.mine}/cancel", headers=bearer(team.tokens["viewer"]))
    assert answer.status_code == 403
    assert answer.json()["detail"] == (
        "viewer-user is a viewer of project vision; this needs a member or an admin of it"
    )
    answer = client.post(f"/jobs/{team.mine}/cancel", headers=bearer(team.tokens["member"]))
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    missing = client.post(f"/jobs/{team.theirs}/cancel", headers=bearer(team.tokens["admin"]))
    assert missing.json()["detail"] == f"job {team.theirs} does not exist"
    assert client.get(f"/jobs/{team.theirs}", headers=ADMIN).json()["status"] == "pending"


def test_sweeps_are_their_projects_like_jobs(team: Team) -> None:

    client = team.client
    ids = {}
    for project in ("vision", "nlp"):
        doc = make_sweep_spec()
        doc["job"]["project"] = project
        answer = client.post("/sweeps", json=doc, headers=ADMIN)
        ok(answer, 201)
        assert answer.json()["project"] == project
        ids[project] = answer.json()["id"]
    for role in ROLES:
        headers = bearer(team.tokens[role])
        listed = client.get("/sweeps", headers=headers).json()
        assert [s["id"] for s in listed] == [ids["vision"]], role
        missing = client.get(f"/sweeps/{ids['nlp']}", headers=headers)
        assert missing.status_code == 404 and "does not exist" in missing.text
        stop = client.post(f"/sweeps/{ids['nlp']}/stop", headers=headers)
        assert stop.status_code == 404
        ok(client.get(f"/sweeps/{ids['vision']}", headers=headers), 200)
        doc = make_sweep_spec()
        doc["job"]["project"] = "nlp"
        assert client.post("/sweeps", json=doc, headers=headers).status_code == 404
    refused = client.post(f"/sweeps/{ids['vision']}/stop", headers=bearer(team.tokens["viewer"]))
    assert refused.status_code == 403 and "viewer" in refused.text
    ok(client.post(f"/sweeps/{ids['vision']}/stop", headers=bearer(team.tokens["member"])), 200)


def test_project_admins_manage_members_and_users_their_own_tokens(team: Team) -> None:
    client = team.client
    admin, member = bearer(team.tokens["admin"]), bearer(team.tokens["member"])
    ok(client.post("/users", json={"name": "newcomer"}, headers=ADMIN), 201)
    ok(client.put("/projects/vision/members/newcomer", json={"role": "member"}, headers=admin), 200)
    detail = client.get("/projects/vision", headers=member).json()
    assert {m["user"]: m["role"] for m in detail["members"]}["newcomer"] == "member"
    refused = client.put(
        "/projects/vision/members/newcomer", json={"role": "admin"}, headers=member
    )
    assert refused.status_code == 403
    ok(client.delete("/projects/vision/members/newcomer", headers=admin), 204)
    gone = client.delete("/projects/vision/members/newcomer", headers=admin)
    assert gone.status_code == 404
    # Their own tokens: make one, list them, revoke it; another's is not theirs to see.
    mine = client.post("/users/member-user/tokens", json={"name": "ci"}, headers=member)
    ok(mine, 201)
    assert mine.json()["kind"] == "user" and mine.json()["user"] == "member-user"
    listed = client.get("/tokens", headers=member).json()
    assert {t["user"] for t in listed} == {"member-user"} and len(listed) == 2
    assert client.post("/users/admin-user/tokens", json={}, headers=member).status_code == 403
    admins = [t for t in client.get("/tokens", headers=ADMIN).json() if t["user"] == "admin-user"]
    assert client.delete(f"/tokens/{admins[0]['id']}", headers=member).status_code == 404
    ok(client.delete(f"/tokens/{mine.json()['id']}", headers=member), 200)
    assert client.get("/me", headers=bearer(mine.json()["token"])).status_code == 401
    # A user who is out of every project sees no job at all.
    ok(client.delete("/projects/vision/members/member-user", headers=ADMIN), 204)
    assert client.get("/jobs", headers=member).json()["total"] == 0
    assert client.get(f"/jobs/{team.mine}", headers=member).status_code == 404


def test_the_job_stream_of_another_project_is_closed_as_a_missing_job(team: Team) -> None:
    client = team.client
    for role in ROLES:
        headers = bearer(team.tokens[role])
        with (
            pytest.raises(WebSocketDisconnect) as closed,
            client.websocket_connect(f"/jobs/{team.theirs}/stream", headers=headers) as ws,
        ):
            ws.send_text(SUBSCRIBE)
            ws.receive_text()
        assert closed.value.reason == f"job {team.theirs} does not exist"
        with client.websocket_connect(f"/jobs/{team.mine}/stream", headers=headers) as ws:
            ws.send_text(SUBSCRIBE)
            first = json.loads(ws.receive_text())
        assert first["type"] == "event" and first["job_id"] == team.mine


def test_the_cluster_stream_shows_only_the_callers_projects(team: Team) -> None:
    client = team.client
    with client.websocket_connect("/stream", headers=bearer(team.tokens["viewer"])) as ws:
        ws.send_text(SUBSCRIBE)
        history = []
        while (frame := json.loads(ws.receive_text()))["type"] != "history_end":
            history.append(frame["job_id"])
        assert history == [team.mine]
        # Live: another project's new job is not sent; this project's is.
        hidden = client.post("/jobs", json=make_spec(project="nlp"), headers=ADMIN).json()["id"]
        shown = client.post("/jobs", json=make_spec(project="vision"), headers=ADMIN).json()["id"]
        seen: list[int] = []
        while not seen or seen[-1] != shown:
            seen.append(json.loads(ws.receive_text())["job_id"])
        assert hidden not in seen and set(seen) <= {team.mine, shown}, seen


def test_tensorboard_of_another_project_is_a_missing_job(team: Team) -> None:
    client = team.client
    for role in ROLES:
        headers = bearer(team.tokens[role])
        got = client.get(f"/jobs/{team.theirs}/tensorboard/", headers=headers)
        assert (got.status_code, got.json()["detail"]) == (404, f"job {team.theirs} does not exist")
        ids = "-".join(map(str, sorted((team.mine, team.theirs))))
        compared = client.get(f"/tensorboard/compare/{ids}/", headers=headers)
        assert compared.status_code == 404


async def test_the_cluster_view_shows_a_user_only_their_projects_tasks(api: Api) -> None:
    for project in ("vision", "nlp"):
        ok(await api.http.post("/projects", json={"name": project}), 201)
    ok(await api.http.post("/users", json={"name": "ana"}), 201)
    ok(await api.http.put("/projects/vision/members/ana", json={"role": "viewer"}), 200)
    ana = (await api.http.post("/users/ana/tokens", json={})).json()["token"]
    async with api.session() as session:
        host = await make_host(session, "host-a", gpus=2)
        placed = {}
        for gpu, project in enumerate(("vision", "nlp")):
            named = await teams_service.find_project(session=session, name=project)
            assert named is not None
            job = await create_job(
                session=session, spec=validate_spec(make_spec()), project_id=named.id
            )
            chief = next(task for task in job.tasks if task.name == "chief:0")
            chief.host_id, chief.port, chief.gpu_indices = host.id, 42000 + gpu, [gpu]
            chief.status = TaskStatus.running
            placed[project] = job.id
        await session.commit()

    everything = (await api.http.get("/cluster")).json()
    (seen,) = everything["hosts"]
    assert sorted(t["job_id"] for t in seen["tasks"]) == sorted(placed.values())

    mine = (await api.http.get("/cluster", headers=bearer(ana))).json()
    (seen,) = mine["hosts"]
    assert [t["job_id"] for t in seen["tasks"]] == [placed["vision"]]
    holders = [d["task"] and d["task"]["job_id"] for d in seen["devices"]]
    assert holders == [placed["vision"], None]  # the other project's GPU: no job named
    assert mine["totals"] == everything["totals"]  # but still taken: free GPUs stay true
