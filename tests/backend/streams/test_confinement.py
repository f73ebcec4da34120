"""Every user-controlled string that becomes a path stays under its root.

* working_dir and checkpoint.dir: refused at submit (422 naming the field) when absolute,
  with '..', NUL or control characters, backslashes; the agent refuses a working dir that
  resolves (through a symlink) outside its workspace (tests/agents/host/test_launcher.py).
* task logs: the task name in the URL must be role:index; a log file or job dir that is a
  symlink out of the log root is neither read nor written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.errors import InvalidInput
from backend.streams.logs import LogOutsideRoot, LogStore
from tests.conftest import Api
from tests.support.factories import make_spec

ESCAPES = {
    "/etc": "must be relative to",
    "../outside": "no '..' parts",
    "jobs/../../outside": "no '..' parts",
    "a\x00b": "must not contain NUL bytes",
    "..\\outside": "must use '/' as its separator",
    "a\rb": "must not contain control characters",
}


@pytest.mark.parametrize(("value", "words"), ESCAPES.items())
async def test_submit_refuses_a_working_dir_that_escapes(api: Api, value: str, words: str) -> None:
    response = await api.http.post("/jobs", json=make_spec(working_dir=value))
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["working_dir"]
    assert errors[0]["message"].startswith("working_dir must") and words in errors[0]["message"]


@pytest.mark.parametrize(("value", "words"), [*ESCAPES.items(), (".", "must name a directory")])
async def test_submit_refuses_a_checkpoint_dir_that_escapes(
    api: Api, value: str, words: str
) -> None:
    response = await api.http.post("/jobs", json=make_spec(checkpoint={"dir": value}))
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["checkpoint.dir"]
    assert words in errors[0]["message"]


async def test_submit_accepts_paths_inside_the_root(api: Api) -> None:
    spec = make_spec(working_dir="projects/日本/run 1", checkpoint={"dir": "team-a/run.1"})
    response = await api.http.post("/jobs", json=spec)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["working_dir"] == "projects/日本/run 1"
    assert response.json()["spec"]["checkpoint"]["dir"] == "team-a/run.1"


@pytest.mark.parametrize("task", ["..:0", "chief:%00", "chief:..", "worker:99999", "~:0"])
async def test_log_reads_take_only_task_names(api: Api, task: str) -> None:
    job = (await api.http.post("/jobs", json=make_spec())).json()
    response = await api.http.get(f"/jobs/{job['id']}/tasks/{task}/logs")
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["task"]


def test_the_log_store_refuses_bad_names(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs", 1 << 20)
    for task in ("../x:0", "chief:0/..", "chief", "chief:0\x00", "/chief:0"):
        with pytest.raises(InvalidInput) as caught:
            store.path(1, task, 0)
        assert caught.value.issues[0].field == "task"
        assert "must be role:index" in caught.value.issues[0].message
    with pytest.raises(InvalidInput, match="attempt: must be 0 or more, got -1"):
        store.path(1, "chief:0", -1)
    with pytest.raises(InvalidInput, match="job_id: must be 1 or more, got 0"):
        store.path(0, "chief:0", 0)


def test_a_log_symlinked_out_of_the_root_is_neither_read_nor_written(tmp_path: Path) -> None:
    root, outside = tmp_path / "logs", tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("do not serve me\n")
    (root / "job-1").mkdir(parents=True)
    (root / "job-1" / "chief-0.0.log").symlink_to(secret)
    (root / "job-2").symlink_to(outside)  # a whole job dir pointing out
    store = LogStore(root, 1 << 20)
    for job_id in (1, 2):
        with pytest.raises(LogOutsideRoot, match="resolves outside the log root"):
            store.read(job_id, "chief:0", 0)
        with pytest.raises(LogOutsideRoot):
            store.append(job_id, "chief:0", 0, 0, ["written where?"])
    assert secret.read_text() == "do not serve me\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    # A symlink that stays inside the root is fine.
    (root / "job-3").mkdir()
    (root / "job-4").symlink_to(root / "job-3")
    store.append(4, "chief:0", 0, 0, ["hello"])
    assert store.read(3, "chief:0", 0).lines == ["hello"]


async def test_the_api_refuses_a_symlinked_log(api: Api) -> None:
    job = (await api.http.post("/jobs", json=make_spec())).json()
    store: LogStore = api.app.state.logs  # type: ignore[attr-defined]
    outside = store.root.parent / "outside.txt"
    outside.write_text("secret\n")
    link = store.root / f"job-{job['id']}" / "chief-0.0.log"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    response = await api.http.get(f"/jobs/{job['id']}/tasks/chief:0/logs")
    assert response.status_code == 404
    assert "resolves outside the log root" in response.json()["detail"]
    assert "secret" not in response.text
