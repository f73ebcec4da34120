"""Disabling a user: every token of theirs is refused from the next request on, their jobs and
memberships stay, enabling them lets their tokens in again, and both are in the audit trail.
Only admin tokens may do it. SQLite and PostgreSQL."""

from __future__ import annotations

from tests.conftest import Api


async def user_with_token(api: Api, name: str) -> dict[str, str]:
    assert (await api.http.post("/users", json={"name": name})).status_code == 201
    assert (await api.http.post("/projects", json={"name": f"{name}-lab"})).status_code == 201
    member = await api.http.put(f"/projects/{name}-lab/members/{name}", json={"role": "admin"})
    assert member.status_code == 200, member.text
    created = await api.http.post(f"/users/{name}/tokens", json={"name": "laptop"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


async def test_a_disabled_user_is_refused_until_enabled_again(api: Api) -> None:
    alice = await user_with_token(api, "alice")
    assert (await api.http.get("/me", headers=alice)).json()["user"] == "alice"

    disabled = await api.http.patch("/users/alice", json={"disabled": True})
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["disabled_at"] is not None
    assert disabled.json()["default_project"] == "alice-lab", "memberships stay"
    for path in ("/me", "/jobs", "/projects"):
        refused = await api.http.get(path, headers=alice)
        assert refused.status_code == 401, (path, refused.text)

    # Asking again changes nothing and records nothing.
    again = await api.http.patch("/users/alice", json={"disabled": True})
    assert again.json()["disabled_at"] == disabled.json()["disabled_at"]

    enabled = await api.http.patch("/users/alice", json={"disabled": False})
    assert enabled.status_code == 200 and enabled.json()["disabled_at"] is None
    me = await api.http.get("/me", headers=alice)
    assert me.status_code == 200 and me.json()["projects"][0]["name"] == "alice-lab"

    entries = (await api.http.get("/audit")).json()["items"]  # newest first
    user_entries = [(e["action"], e["target"]) for e in entries if e["action"].startswith("user.")]
    assert user_entries[:2] == [("user.enable", "user alice"), ("user.disable", "user alice")]
    assert [a for a, _ in user_entries].count("user.disable") == 1


async def test_only_admin_tokens_disable_users_and_a_missing_one_is_named(api: Api) -> None:
    alice = await user_with_token(api, "alice")
    await user_with_token(api, "bob")
    # A project admin is no admin of users: not even of themselves.
    for name in ("bob", "alice"):
        refused = await api.http.patch(f"/users/{name}", json={"disabled": True}, headers=alice)
        assert refused.status_code == 403, refused.text
    missing = await api.http.patch("/users/carol", json={"disabled": True})
    assert missing.status_code == 404 and "no user named carol" in missing.text
    bad = await api.http.patch("/users/bob", json={"disabled": "soon"})
    assert bad.status_code == 422 and "disabled" in bad.text
    extra = await api.http.patch("/users/bob", json={"disabled": True, "name": "robert"})
    assert extra.status_code == 422 and "name" in extra.text
    users = {u["name"]: u for u in (await api.http.get("/users")).json()}
    assert users["bob"]["disabled_at"] is None, "a refused request changed nothing"
