"""Every route but /healthz needs a token, and only a token of the right kind."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from backend.auth import Principal, TokenKind, TokenRegistry
from tests.conftest import AGENT_TOKEN, Api

SHA = "0" * 64
# Every REST route, with a body that would be valid for it.
ROUTES: list[tuple[str, str]] = [
    ("POST", "/jobs"),
    ("GET", "/jobs"),
    ("GET", "/jobs/1"),
    ("POST", "/jobs/1/cancel"),
    ("POST", "/jobs/1/suspend"),
    ("POST", "/jobs/1/resume"),
    ("GET", "/jobs/1/events"),
    ("GET", "/jobs/1/tasks/chief:0/logs"),
    ("GET", "/jobs/1/metrics"),
    ("POST", "/jobs/1/restart"),
    ("POST", "/jobs/1/tasks/chief:0/restart"),
    ("GET", "/jobs/1/checkpoints"),
    ("POST", "/jobs/1/checkpoint"),
    ("POST", "/jobs/1/evaluator"),
    ("POST", "/jobs/1/client"),
    ("POST", "/jobs/1/client/7/heartbeat"),
    ("DELETE", "/jobs/1/client/7"),
    ("GET", "/hosts"),
    ("DELETE", "/hosts/local-0"),
    ("POST", "/hosts/local-0/drain"),
    ("DELETE", "/hosts/local-0/drain"),
    ("POST", "/hosts/local-0/notice"),
    ("POST", "/hosts/local-0/cordon"),
    ("POST", "/hosts/local-0/uncordon"),
    ("GET", "/cluster"),
    ("GET", "/replicas"),
    ("GET", "/metrics"),
    ("POST", "/tokens"),
    ("GET", "/tokens"),
    ("DELETE", "/tokens/1"),
    ("GET", "/tokens/self"),
    ("PUT", f"/code/{SHA}"),
    ("GET", f"/code/{SHA}/manifest"),
    ("GET", "/me"),
    ("GET", "/users"),
    ("POST", "/users"),
    ("PATCH", "/users/alice"),
    ("POST", "/users/alice/tokens"),
    ("GET", "/projects"),
    ("POST", "/projects"),
    ("GET", "/projects/vision"),
    ("PUT", "/projects/vision/members/alice"),
    ("DELETE", "/projects/vision/members/alice"),
    ("PUT", "/projects/vision/quota"),
    ("GET", "/audit"),
    ("POST", "/sweeps"),
    ("GET", "/sweeps"),
    ("GET", "/sweeps/1"),
    ("POST", "/sweeps/1/stop"),
]
# Routes that decide by the caller's role in projects rather than by the token's kind alone:
# an agent is refused with a message of their own.
ROLE_ROUTES = {("GET", "/audit")}
# Routes that agents may call too (they fetch code bundles).
AGENT_ROUTES: list[tuple[str, str]] = [("GET", f"/code/{SHA}")]


async def test_the_route_list_covers_every_protected_route(api: Api) -> None:
    schema = (await api.http.get("/openapi.json")).json()
    documented = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
        if path != "/healthz"
    }
    templated = {
        (
            m,
            p.replace("/tokens/1", "/tokens/{token_id}")
            .replace("/users/alice", "/users/{name}")
            .replace("/projects/vision", "/projects/{name}")
            .replace("/members/alice", "/members/{user}")
            .replace("/hosts/local-0", "/hosts/{name}")
            .replace("/client/7", "/client/{session}")
            .replace("/sweeps/1", "/sweeps/{sweep_id}")
            .replace("/1", "/{job_id}")
            .replace("chief:0", "{task}")
            .replace(SHA, "{sha256}"),
        )
        for m, p in [*ROUTES, *AGENT_ROUTES, ("HEAD", f"/code/{SHA}")]
    }
    assert documented == templated
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            assert (operation.get("security") is None) == (path == "/healthz"), path


@pytest.mark.parametrize(("method", "path"), ROUTES + AGENT_ROUTES)
async def test_no_token_is_401(api: Api, method: str, path: str) -> None:
    response = await api.http.request(method, path, headers={"Authorization": ""})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "missing bearer token" in response.json()["detail"]


@pytest.mark.parametrize(("method", "path"), ROUTES + AGENT_ROUTES)
async def test_wrong_token_is_401(api: Api, method: str, path: str) -> None:
    response = await api.http.request(
        method, path, headers={"Authorization": "Bearer not-a-real-token"}
    )
    assert response.status_code == 401
    assert response.json()["detail"] == "invalid bearer token"


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_agent_token_is_403(api: Api, method: str, path: str) -> None:
    response = await api.http.request(
        method, path, headers={"Authorization": f"Bearer {AGENT_TOKEN}"}
    )
    assert response.status_code == 403
    if (method, path) not in ROLE_ROUTES:
        assert "needs a token of kind admin" in response.json()["detail"]
        assert "kind agent was given" in response.json()["detail"]


async def test_code_bundles_can_be_asked_for_with_an_agent_token_only_with_a_token(
    api: Api,
) -> None:
    for method in ("HEAD", "GET"):
        response = await api.http.request(
            method, f"/code/{SHA}", headers={"Authorization": f"Bearer {AGENT_TOKEN}"}
        )
        assert response.status_code == 404, method
    assert (await api.http.head(f"/code/{SHA}", headers={"Authorization": ""})).status_code == 401


async def test_basic_scheme_is_not_a_bearer_token(api: Api) -> None:
    response = await api.http.get("/jobs", headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
    assert response.status_code == 401


async def test_healthz_needs_no_token(api: Api) -> None:
    response = await api.http.get("/healthz", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["database"] in ("sqlite", "postgresql")


def test_registry_identifies_each_kind_and_nothing_else() -> None:
    registry = TokenRegistry(
        {TokenKind.admin: SecretStr("a" * 32), TokenKind.agent: SecretStr("b" * 32)}
    )
    assert registry.identify("a" * 32) == Principal(TokenKind.admin)
    assert registry.identify("b" * 32) == Principal(TokenKind.agent)
    assert registry.identify("a" * 31) is None
    assert registry.identify("") is None


def test_unset_or_empty_tokens_admit_nobody() -> None:
    registry = TokenRegistry({TokenKind.admin: SecretStr(""), TokenKind.agent: None})
    assert registry.identify("") is None


def test_task_tokens_speak_for_their_own_job_only() -> None:
    registry = TokenRegistry({TokenKind.admin: SecretStr("a" * 32), TokenKind.agent: None})
    token = registry.task_token(7)
    assert registry.identify(token) == Principal(TokenKind.task, job_id=7)
    forged = token.replace("st.7.", "st.8.")
    assert registry.identify(forged) is None
    other_server = TokenRegistry({TokenKind.admin: SecretStr("b" * 32), TokenKind.agent: None})
    assert other_server.identify(token) is None


async def test_task_token_cannot_use_the_admin_api(api: Api) -> None:
    token = api.app.state.tokens.task_token(1)  # type: ignore[attr-defined]
    response = await api.http.get("/jobs", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403
