"""The spec's `environment` (an image or an interpreter): what it accepts, how it refuses bad
input, and that every task's start message carries it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.protocol import StartTask, TaskKey
from agents.runtime_environment import RuntimeEnvironment
from backend.errors import InvalidInput
from backend.jobs.spec import JobSpec, validate_spec
from backend.scheduling.launch import JobLaunch
from tests.conftest import Api
from tests.support.factories import make_spec

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "image",
    [
        "tensorflow/tensorflow:2.21.0",
        "tensorflow/tensorflow:2.21.0-gpu",
        "ubuntu",
        "registry.example.com:5000/team/train:v1",
        "localhost/strata-test",
        f"tensorflow/tensorflow@{DIGEST}",
        f"ghcr.io/org/img:tag@{DIGEST}",
        "my_org/my-image__x",
    ],
)
def test_valid_image_references_are_accepted(image: str) -> None:
    spec = validate_spec(make_spec(environment={"image": image}))
    assert spec.environment == RuntimeEnvironment(image=image)
    assert spec.image == image


def test_an_interpreter_on_the_hosts_is_accepted_and_has_no_image() -> None:
    spec = validate_spec(make_spec(environment={"python": "/opt/conda/envs/tf/bin/python"}))
    assert spec.environment is not None
    assert spec.environment.python == "/opt/conda/envs/tf/bin/python"
    assert spec.image is None


def test_no_environment_is_the_agents_own_interpreter() -> None:
    spec = validate_spec(make_spec())
    assert spec.environment is None and spec.image is None


BAD_ENVIRONMENTS: list[tuple[str, Any, str, str]] = [
    # (case, environment, field named, words the message must contain)
    ("uppercase", {"image": "TensorFlow/TF"}, "environment.image", "not a valid image reference"),
    ("spaces", {"image": "tensorflow tf"}, "environment.image", "tensorflow/tensorflow:2.21.0"),
    ("empty", {"image": ""}, "environment.image", "[registry[:port]/]name[:tag]"),
    ("bad tag", {"image": "tf:-x"}, "environment.image", "not a valid image reference"),
    ("short digest", {"image": "tf@sha256:abc"}, "environment.image", "@sha256:digest"),
    ("scheme", {"image": "https://x/y"}, "environment.image", "not a valid image reference"),
    ("too long", {"image": "a" * 256}, "environment.image", "at most 255 characters"),
    ("not text", {"image": 5}, "environment.image", "valid string"),
    (
        "both",
        {"image": "tensorflow/tensorflow", "python": "/usr/bin/python3"},
        "environment",
        "give environment.image or environment.python, not both",
    ),
    (
        "relative python",
        {"python": "envs/tf/bin/python"},
        "environment.python",
        "must be the absolute path of an interpreter on the hosts",
    ),
    ("unknown field", {"conda": "tf"}, "environment.conda", "expected one of: image, python"),
    ("not a mapping", "tensorflow/tensorflow", "environment", "valid dictionary"),
]


@pytest.mark.parametrize(
    ("environment", "field", "words"),
    [pytest.param(e, f, w, id=case) for case, e, f, w in BAD_ENVIRONMENTS],
)
def test_bad_environment_is_refused_naming_the_field(
    environment: Any, field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_spec(make_spec(environment=environment))
    fields = {issue.field: issue.message for issue in caught.value.issues}
    assert list(fields) == [field], fields
    assert words in fields[field]


async def test_a_bad_image_is_a_422_naming_the_field_and_nothing_is_stored(api: Api) -> None:
    response = await api.http.post("/jobs", json=make_spec(environment={"image": "Not/Valid"}))
    assert response.status_code == 422
    (error,) = response.json()["errors"]
    assert error["field"] == "environment.image"
    assert error["message"].startswith("'Not/Valid' is not a valid image reference: expected")
    assert (await api.http.get("/jobs")).json()["total"] == 0


async def test_the_environment_is_stored_with_the_job(api: Api) -> None:
    image = "tensorflow/tensorflow:2.21.0"
    created = await api.http.post("/jobs", json=make_spec(environment={"image": image}))
    assert created.status_code == 201, created.text
    job = (await api.http.get(f"/jobs/{created.json()['id']}")).json()
    assert job["spec"]["environment"] == {"image": image, "python": None}


def _starts(spec: JobSpec, tmp_path: Path) -> dict[str, StartTask]:
    tasks = [
        f"{role}:{index}"
        for role in ("chief", "worker", "ps", "evaluator")
        for index in range(spec.replicas.of(role).count)  # type: ignore[arg-type]
    ]
    launch = JobLaunch.of(spec=spec, job_id=7, task_token="t", checkpoint_root=tmp_path)
    return {
        task: launch.start_message(
            key=TaskKey(job_id=7, task=task, attempt=0), port=20000, gpus=[], tf_config={}
        )
        for task in tasks
    }


@pytest.mark.parametrize(
    "environment", [{"image": "tensorflow/tensorflow:2.21.0"}, {"python": "/opt/tf/bin/python"}]
)
def test_every_task_starts_in_the_environment_the_runtime_servers_too(
    environment: dict[str, str], tmp_path: Path
) -> None:
    replicas = {
        "chief": {"count": 1},
        "worker": {"count": 2},
        "ps": {"count": 1},
        "evaluator": {"count": 1},
    }
    spec = validate_spec(make_spec(environment=environment, replicas=replicas))
    starts = _starts(spec, tmp_path)
    assert sorted(starts) == ["chief:0", "evaluator:0", "ps:0", "worker:0", "worker:1"]
    for start in starts.values():
        assert start.environment == RuntimeEnvironment(**environment)
        # And on the wire, as the agent reads it.
        wire = StartTask.model_validate_json(start.model_dump_json())
        assert wire.environment == RuntimeEnvironment(**environment)


@pytest.mark.parametrize("overrides", [{}, {"environment": {}}], ids=["absent", "empty"])
def test_without_an_environment_the_start_message_leaves_it_out(
    overrides: dict[str, Any], tmp_path: Path
) -> None:
    for start in _starts(validate_spec(make_spec(**overrides)), tmp_path).values():
        assert start.environment is None
        assert "environment" not in start.model_dump()
