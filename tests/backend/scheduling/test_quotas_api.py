"""Setting a project's quotas and whether its jobs may preempt other projects' (`PUT
/projects/{name}/quota`: admin tokens only, recorded in the audit trail) and the priority
quota at submission (a 422 naming both numbers)."""

from __future__ import annotations

from backend.teams.roles import ProjectRole
from tests.backend.audit.test_audit import user_token
from tests.conftest import Api
from tests.support.factories import make_spec


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_an_admin_token_sets_a_quota_and_it_is_recorded(api: Api) -> None:
    quota = {"max_gpus": 8, "max_priority": 10, "may_preempt_other_projects": False}
    answer = await api.http.put("/projects/default/quota", json=quota)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"project": "default", **quota}
    project = (await api.http.get("/projects/default")).json()
    assert project["may_preempt_other_projects"] is False
    # A PUT replaces the quotas: what it leaves out goes back to its default.
    again = await api.http.put("/projects/default/quota", json={"max_gpus": None})
    cleared = {"max_gpus": None, "max_priority": None, "may_preempt_other_projects": True}
    assert again.json() == {"project": "default", **cleared}

    entries = (await api.http.get("/audit", params={"action": "quota.set"})).json()["items"]
    assert [(e["project"], e["target"], e["detail"]) for e in entries] == [
        ("default", "project default", {**cleared, "before": quota}),
        ("default", "project default", {**quota, "before": cleared}),
    ]


async def test_only_an_admin_token_sets_quotas(api: Api) -> None:
    owner = await user_token(api, "olga", {"vision": ProjectRole.admin})
    await user_token(api, "pat", {"nlp": ProjectRole.member})
    # A project's own admin may not raise its quota; another project is not named as existing.
    own = await api.http.put("/projects/vision/quota", json={"max_gpus": 99}, headers=bearer(owner))
    assert own.status_code == 403, own.text
    assert "admin token" in own.json()["detail"]
    other = await api.http.put("/projects/nlp/quota", json={"max_gpus": 1}, headers=bearer(owner))
    unknown = await api.http.put("/projects/nowhere/quota", json={"max_gpus": 1})
    assert other.status_code == unknown.status_code == 404
    for body, field in (
        ({"max_gpus": -1}, "max_gpus"),
        ({"max_priority": 101}, "max_priority"),
        ({"may_preempt_other_projects": "sometimes"}, "may_preempt_other_projects"),
        ({"max_cpus": 3}, "max_cpus"),
    ):
        bad = await api.http.put("/projects/vision/quota", json=body)
        assert bad.status_code == 422, bad.text
        assert bad.json()["errors"][0]["field"] == field
    assert (await api.http.get("/audit", params={"action": "quota.set"})).json()["items"] == []


async def test_a_priority_over_the_projects_maximum_is_refused_naming_both(api: Api) -> None:
    await api.http.put("/projects/default/quota", json={"max_priority": 5})
    refused = await api.http.post("/jobs", json=make_spec("mirrored", priority=6))
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"] == [
        {"field": "priority", "message": "priority 6 is over the maximum of project default, 5"}
    ]
    accepted = await api.http.post("/jobs", json=make_spec("mirrored", priority=5))
    assert accepted.status_code == 201, accepted.text
