"""Stored tokens (`/tokens`, `strata tokens`) and who may call what: every REST route and
every websocket, with every kind of token, and what each must get."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from starlette.websockets import WebSocketDisconnect

from agents.protocol import Hello, TaskHello
from backend.app import create_app
from backend.db import utcnow
from backend.tokens.models import ApiToken
from backend.tokens.service import token_hash
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.factories import make_spec

# Routes anyone may call: health for load balancers, the API's own description, the dashboard
# (it asks for a token itself and sends it with every call).
PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/ui/"}


def admin(client: TestClient) -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create(client: TestClient, name: str, kind: str, **extra: object) -> dict[str, object]:
    answer = client.post(
        "/tokens", json={"name": name, "kind": kind, **extra}, headers=admin(client)
    )
    assert answer.status_code == 201, answer.text
    created: dict[str, object] = answer.json()
    return created


def test_a_token_is_shown_once_stored_hashed_and_can_be_revoked(client: TestClient) -> None:
    created = create(client, "grafana", "viewer")
    secret = str(created["token"])
    assert secret.startswith("stk_") and len(secret) >= 40
    assert created["prefix"] == secret[:12] and created["active"] is True

    listed = client.get("/tokens", headers=admin(client)).json()
    assert [t["name"] for t in listed] == ["grafana"]
    assert "token" not in listed[0]
    assert secret not in client.get("/tokens", headers=admin(client)).text

    async def stored() -> list[ApiToken]:
        async with client.app.state.sessions() as session:  # type: ignore[attr-defined]
            return list((await session.scalars(select(ApiToken))).all())

    (row,) = client.portal.call(stored)  # type: ignore[union-attr]
    assert row.token_hash == token_hash(secret)
    assert secret not in repr([getattr(row, c.name) for c in ApiToken.__table__.columns])

    assert client.get("/jobs", headers=bearer(secret)).status_code == 200
    revoked = client.delete(f"/tokens/{created['id']}", headers=admin(client))
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert revoked.json()["revoked_at"] is not None
    refused = client.get("/jobs", headers=bearer(secret))
    assert refused.status_code == 401
    again = client.delete(f"/tokens/{created['id']}", headers=admin(client))
    assert again.status_code == 200 and again.json()["revoked_at"] == revoked.json()["revoked_at"]
    assert client.delete("/tokens/999", headers=admin(client)).status_code == 404


def test_a_token_says_what_kind_it_is(client: TestClient) -> None:
    # The dashboard asks, to grey out what a viewer token may not do.
    assert client.get("/tokens/self", headers=admin(client)).json() == {
        "kind": "admin",
        "token_id": None,
    }
    viewer = create(client, "wall-screen", "viewer")
    answer = client.get("/tokens/self", headers=bearer(str(viewer["token"])))
    assert answer.json() == {"kind": "viewer", "token_id": viewer["id"]}
    stored_admin = create(client, "ops", "admin")
    answer = client.get("/tokens/self", headers=bearer(str(stored_admin["token"])))
    assert answer.json() == {"kind": "admin", "token_id": stored_admin["id"]}
    refused = client.get("/tokens/self", headers=bearer(AGENT_TOKEN))
    assert refused.status_code == 403 and "kind agent" in refused.json()["detail"]
    assert client.get("/tokens/self").status_code == 401


def test_token_requests_are_validated(client: TestClient) -> None:
    for body, field in (
        ({"name": "x", "kind": "task"}, "kind"),
        ({"name": "has space", "kind": "viewer"}, "name"),
        ({"name": "x", "kind": "viewer", "expires_in_seconds": 5}, "expires_in_seconds"),
        ({"name": "x", "kind": "viewer", "scope": "all"}, "scope"),
    ):
        answer = client.post("/tokens", json=body, headers=admin(client))
        assert answer.status_code == 422, (body, answer.text)
        assert field in answer.text


# --- the matrix --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tokens:
    admin: str
    viewer: str
    stored_admin: str
    agent: str
    stored_agent: str
    revoked: str
    expired: str
    task_of_another_job: str


@pytest.fixture
def matrix_client(database_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, Tokens]]:
    with TestClient(create_app(make_settings(database_url, tmp_path / "data"))) as client:
        job = client.post("/jobs", json=make_spec(), headers=admin(client))
        other = client.post("/jobs", json=make_spec(), headers=admin(client))
        assert job.status_code == other.status_code == 201
        revoked = create(client, "old", "admin")
        client.delete(f"/tokens/{revoked['id']}", headers=admin(client))
        expired = str(create(client, "short", "admin", expires_in_seconds=60)["token"])

        async def expire() -> None:
            async with client.app.state.sessions() as session:  # type: ignore[attr-defined]
                await session.execute(
                    update(ApiToken)
                    .where(ApiToken.token_hash == token_hash(expired))
                    .values(expires_at=utcnow() - timedelta(seconds=1))
                )
                await session.commit()

        client.portal.call(expire)  # type: ignore[union-attr]
        tokens = Tokens(
            admin=ADMIN_TOKEN,
            viewer=str(create(client, "viewer", "viewer")["token"]),
            stored_admin=str(create(client, "ops", "admin")["token"]),
            agent=AGENT_TOKEN,
            stored_agent=str(create(client, "rack-2", "agent")["token"]),
            revoked=str(revoked["token"]),
            expired=expired,
            task_of_another_job=client.app.state.tokens.task_token(other.json()["id"]),  # type: ignore[attr-defined]
        )
        yield client, tokens


def concrete(path: str) -> str:
    """A path with its parameters filled in (job 1 exists; so does its chief:0)."""
    # name: a host that is not there, and project `default` (which the migration makes).
    values = {"job_id": "1", "task": "chief:0", "token_id": "1", "name": "default"}
    return re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: values.get(m[1], "1"), path)


def rest_routes(client: TestClient) -> list[tuple[str, str]]:
    """Every operation the API describes (its OpenAPI document lists them all)."""
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    return [
        (method.upper(), path)
        for path, operations in paths.items()
        if path not in PUBLIC
        for method in operations
    ]


def test_every_route_admits_only_whom_it_should(
    matrix_client: tuple[TestClient, Tokens],
) -> None:
    client, tokens = matrix_client
    routes = rest_routes(client)
    assert len(routes) >= 15, routes  # the matrix sees the API, not an empty list
    problems = []
    for method, path in routes:
        url = concrete(path)
        # Agents fetch code bundles; viewers do not. What a bundle holds (its manifest) is
        # for readers, as the jobs that run in it are.
        fetches_code = (
            path.startswith("/code/")
            and not path.endswith("/manifest")
            and method in ("GET", "HEAD")
        )
        reads = (
            method == "GET"
            and not fetches_code
            and (not path.startswith("/tokens") or path == "/tokens/self")
            and path != "/audit"  # admins and project admins (tests/backend/audit/test_audit.py)
            and path != "/users"  # who the users are: admin tokens only
        )

        expected: list[tuple[str, dict[str, str] | None, set[int] | None]] = [
            ("no token", None, {401}),
            ("malformed header", {"Authorization": "Basic abc"}, {401}),
            ("unknown token", bearer("nope"), {401}),
            ("unknown stored-looking token", bearer("stk_" + "x" * 43), {401}),
            ("revoked", bearer(tokens.revoked), {401}),
            ("expired", bearer(tokens.expired), {401}),
            ("agent", bearer(tokens.agent), None if fetches_code else {403}),
            ("stored agent", bearer(tokens.stored_agent), None if fetches_code else {403}),
            ("task of another job", bearer(tokens.task_of_another_job), {403}),
            ("viewer", bearer(tokens.viewer), None if reads else {403}),
            ("admin", bearer(tokens.admin), None),
            ("stored admin", bearer(tokens.stored_admin), None),
        ]
        for who, headers, allowed in expected:
            # The body does not matter: authentication and scope come before validation.
            got = client.request(method, url, headers=headers, json={}).status_code
            ok = got not in (401, 403) if allowed is None else got in allowed
            if not ok:
                problems.append(f"{method} {path} as {who}: {got}")
    assert not problems, "\n".join(problems)


def test_every_websocket_admits_only_whom_it_should(
    matrix_client: tuple[TestClient, Tokens],
) -> None:
    client, tokens = matrix_client
    task_of_job_1 = client.app.state.tokens.task_token(1)  # type: ignore[attr-defined]
    hello = Hello(
        name="matrix-host",
        identity="matrix-host-identity",
        address="127.0.0.1",
        port_range=(1, 2),
        devices=[],
        version="test",
    )
    subscribe = json.dumps({"type": "subscribe", "cursor": None})
    channels = {
        # path: (the first frame, what a welcome looks like, who is let in)
        "/agents/connect": (hello.model_dump_json(), '"welcome"', {"agent", "stored agent"}),
        "/tasks/connect": (
            TaskHello(task="chief:0", attempt=0).model_dump_json(),
            '"task_welcome"',
            {"task of this job"},
        ),
        "/jobs/1/stream": (subscribe, '"type"', {"viewer", "admin", "stored admin"}),
        "/stream": (subscribe, '"type"', {"viewer", "admin", "stored admin"}),
    }
    callers: dict[str, str | None] = {
        "no token": None,
        "unknown token": "nope",
        "unknown stored-looking token": "stk_" + "x" * 43,
        "revoked": tokens.revoked,
        "expired": tokens.expired,
        "agent": tokens.agent,
        "stored agent": tokens.stored_agent,
        "task of another job": tokens.task_of_another_job,
        "task of this job": task_of_job_1,
        "viewer": tokens.viewer,
        "admin": tokens.admin,
        "stored admin": tokens.stored_admin,
    }
    problems = []
    for path, (first, welcome, admitted) in channels.items():
        for who, token in callers.items():
            # The task channel is scoped by its token: another job's token opens that job's.
            if path == "/tasks/connect" and who == "task of another job":
                continue
            headers = bearer(token) if token is not None else {}
            try:
                with client.websocket_connect(path, headers=headers) as ws:
                    ws.send_text(first)
                    answer = ws.receive_text()
                outcome = "admitted" if welcome in answer else f"answered {answer[:80]}"
            except WebSocketDisconnect as exc:
                outcome = f"closed {exc.code}: {exc.reason}"
            if who in admitted and outcome != "admitted":
                problems.append(f"{path} refused {who}: {outcome}")
            if who not in admitted and not (
                outcome.startswith("closed 1008") and "token" in outcome
            ):
                problems.append(f"{path} let {who} in: {outcome}")
    assert not problems, "\n".join(problems)
