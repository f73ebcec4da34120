"""A job's tags and description: validated in the spec, filtered on in GET /jobs (both DBs)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.support.factories import make_spec


async def submit(api: Api, name: str, **fields: Any) -> int:
    response = await api.http.post("/jobs", json=make_spec(name=name, **fields))
    assert response.status_code == 201, response.text
    job_id: int = response.json()["id"]
    return job_id


async def names(api: Api, **params: Any) -> list[str]:
    response = await api.http.get("/jobs", params=params)
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["total"] == len(page["items"])
    return sorted(job["name"] for job in page["items"])


async def test_tags_and_description_are_kept_and_filtered_on(api: Api) -> None:
    await submit(
        api,
        "resnet-a",
        tags=["baseline", "team:vision", "lr=0.1"],
        description="ResNet on digits,\nthe 50% learning-rate run",
    )
    await submit(api, "resnet-b", tags=["baseline"], description="second try/2")
    await submit(api, "plain")  # neither: the defaults
    await submit(api, "ab-job", tags=["ab"])

    job = (await api.http.get("/jobs", params={"name": "resnet-a"})).json()["items"][0]
    assert job["spec"]["tags"] == ["baseline", "team:vision", "lr=0.1"]
    assert job["spec"]["description"].startswith("ResNet on digits,\n")
    plain = (await api.http.get("/jobs", params={"name": "plain"})).json()["items"][0]
    assert plain["spec"]["tags"] == [] and plain["spec"]["description"] == ""

    assert await names(api, tag="baseline") == ["resnet-a", "resnet-b"]
    assert await names(api, tag=["baseline", "team:vision"]) == ["resnet-a"]
    assert await names(api, tag="lr=0.1") == ["resnet-a"]
    assert await names(api, tag="team") == []  # a whole tag, not a part of one
    assert await names(api, tag="a_") == []  # '_' is no wildcard
    assert await names(api, tag="ab") == ["ab-job"]
    assert await names(api, q="RESNET") == ["resnet-a", "resnet-b"]  # the name, any case
    assert await names(api, q="learning-RATE") == ["resnet-a"]  # the description
    assert await names(api, q="50%") == ["resnet-a"]  # '%' is no wildcard
    assert await names(api, q="g_rate") == []  # nor '_' ("learning-rate")
    assert await names(api, q="try/2") == ["resnet-b"]  # '/' (LIKE's escape) is itself
    assert await names(api, q="second", tag="baseline") == ["resnet-b"]
    assert await names(api, q="nothing like it") == []


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"tags": ["has space"]}, "tags", "each tag must be"),
        ({"tags": ["-leading"]}, "tags", "starting with a letter or digit"),
        ({"tags": ["x" * 33]}, "tags", "1-32 characters"),
        ({"tags": [f"t{i}" for i in range(17)]}, "tags", "at most 16"),
        ({"tags": ["a", "a"]}, "tags", "must not repeat"),
        ({"tags": "baseline"}, "tags", "list"),
        ({"description": "x" * 4001}, "description", "at most 4000"),
        ({"description": "bell\x07"}, "description", "control characters"),
    ],
)
async def test_bad_tags_and_descriptions_are_422_naming_the_field(
    api: Api, fields: dict[str, Any], field: str, words: str
) -> None:
    response = await api.http.post("/jobs", json=make_spec(**fields))
    assert response.status_code == 422, response.text
    [issue] = response.json()["errors"]
    assert issue["field"] == field and words in issue["message"], issue


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tag": "not a tag"}, "tag"),
        ({"tag": [f"t{i}" for i in range(17)]}, "tag"),
        ({"q": ""}, "q"),
        ({"q": "x" * 201}, "q"),
    ],
)
async def test_bad_list_filters_are_422(api: Api, params: dict[str, Any], field: str) -> None:
    response = await api.http.get("/jobs", params=params)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == field
