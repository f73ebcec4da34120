"""TensorBoard per job and per comparison: real TensorBoard processes behind the app's proxy.

Event files are written by the runtime's own writer (agents.runtime.event_files) into the
jobs' checkpoint dirs; the app (its lifespan running, SQLite) starts TensorBoard on the first
request, proxies it, refuses callers without a token, caps how many run, and reaps idle ones.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.runtime.event_files import EventFileSink
from backend.app import create_app
from backend.errors import Conflict
from backend.tensorboard.processes import BoardSpec, TensorBoards
from backend.tensorboard.serve import PARENT_ENV, watch_parent
from tests.agents.runtime.test_runtime_callbacks import Recorder
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings
from tests.support.factories import make_spec

pytestmark = pytest.mark.slow  # TensorBoard processes (and TensorFlow for the writer)


def write_events(logdir: Path, name: str, values: list[float]) -> None:
    sink = EventFileSink(Recorder(), logdir, interval=3600)
    for step, value in enumerate(values, start=1):
        sink.put(name, value, step)
    sink.close(timeout=5)


class Strata:
    def __init__(self, http: httpx.AsyncClient, app: object, checkpoints: Path) -> None:
        self.http = http
        self.app = app
        self.checkpoints = checkpoints

    @property
    def boards(self) -> TensorBoards:
        return self.app.state.tensorboards  # type: ignore[attr-defined, no-any-return]

    async def job_with_events(self, loss: list[float]) -> int:
        created = await self.http.post("/jobs", json=make_spec())
        assert created.status_code == 201, created.text
        job_id: int = created.json()["id"]
        write_events(
            self.checkpoints / f"job-{job_id}" / "tensorboard" / "chief-0", "batch/loss", loss
        )
        return job_id


@pytest.fixture
async def strata(tmp_path: Path) -> AsyncIterator[Strata]:
    settings = make_settings(
        f"sqlite:///{tmp_path / 'strata.db'}", tmp_path / "data", tensorboard_max=2
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://strata.test") as http:
            yield Strata(http, app, settings.checkpoints)


BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def loaded(
    http: httpx.AsyncClient, url: str, expected: set[str], headers: dict[str, str] | None = None
) -> Any:
    """GET `url` until its JSON holds all of `expected` (TensorBoard reads the event files on
    a thread of its own, after it has started serving), or a minute has passed."""
    deadline = time.monotonic() + 60
    while True:
        answer = await http.get(url, headers=headers)
        assert answer.status_code == 200, answer.text
        if expected <= set(answer.json()) or time.monotonic() > deadline:
            return answer.json()
        await asyncio.sleep(0.2)


async def test_a_job_s_tensorboard_is_served_behind_the_token(strata: Strata) -> None:
    strata.http.headers.update(BEARER)
    job_id = await strata.job_with_events([2.0, 1.0, 0.5])
    base = f"/jobs/{job_id}/tensorboard"
    strata.http.headers.pop("Authorization")

    refused = await strata.http.get(f"{base}/data/runs")
    assert refused.status_code == 401 and "token" in refused.json()["detail"]
    assert (await strata.http.get(f"{base}/data/runs?token=wrong")).status_code == 401
    agent = await strata.http.get(
        f"{base}/data/runs", headers={"Authorization": f"Bearer {AGENT_TOKEN}"}
    )
    assert agent.status_code == 403
    assert strata.boards.running() == []  # nothing started for those

    assert await loaded(strata.http, f"{base}/data/runs", {"chief-0"}, BEARER) == ["chief-0"]
    tags = await loaded(strata.http, f"{base}/data/plugin/scalars/tags", {"chief-0"}, BEARER)
    assert list(tags["chief-0"]) == ["batch/loss"]
    points = await strata.http.get(
        f"{base}/data/plugin/scalars/scalars",
        params={"run": "chief-0", "tag": "batch/loss"},
        headers=BEARER,
    )
    assert [(step, value) for _, step, value in points.json()] == [(1, 2.0), (2, 1.0), (3, 0.5)]
    page = await strata.http.get(f"{base}/", headers=BEARER)
    assert page.status_code == 200 and "<tb-webapp>" in page.text
    [board] = strata.boards.running()
    assert board.spec.key == f"job-{job_id}"

    # The browser's way: ?token= once, moved into a cookie scoped to this board's path.
    opened = await strata.http.get(f"{base}/?token={ADMIN_TOKEN}&x=1")
    assert opened.status_code == 303
    assert opened.headers["location"] == f"{base}/?x=1"
    cookie = opened.headers["set-cookie"]
    assert f"Path={base}/" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    with_cookie = await strata.http.get(f"{base}/data/runs")
    assert with_cookie.status_code == 200 and with_cookie.json() == ["chief-0"]
    strata.http.cookies.clear()
    assert (await strata.http.get(f"{base}/data/runs")).status_code == 401
    assert strata.boards.running() == [board]  # one process served all of it

    missing = await strata.http.get("/jobs/999/tensorboard/data/runs", headers=BEARER)
    assert missing.status_code == 404


async def test_compare_serves_a_run_per_job_and_the_cap_is_a_409(strata: Strata) -> None:
    strata.http.headers.update(BEARER)
    first = await strata.job_with_events([3.0, 2.0])
    second = await strata.job_with_events([1.0])

    bad = await strata.http.get("/tensorboard/compare", params={"jobs": str(first)})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "jobs"
    redirect = await strata.http.get("/tensorboard/compare", params={"jobs": f"{second},{first}"})
    assert redirect.status_code == 307
    base = f"/tensorboard/compare/{first}-{second}"
    assert redirect.headers["location"] == f"{base}/"
    expected = {f"job{first}/chief-0", f"job{second}/chief-0"}
    assert set(await loaded(strata.http, f"{base}/data/runs", expected)) == expected
    tags = await loaded(strata.http, f"{base}/data/plugin/scalars/tags", expected)
    assert all(list(tags[run]) == ["batch/loss"] for run in expected)
    unknown = await strata.http.get(f"/tensorboard/compare/{first}-999/data/runs")
    assert unknown.status_code == 404

    # Two boards run (the cap in this app); a third is refused with the setting's name.
    assert (await strata.http.get(f"/jobs/{first}/tensorboard/data/runs")).status_code == 200
    refused = await strata.http.get(f"/jobs/{second}/tensorboard/data/runs")
    assert refused.status_code == 409
    assert "STRATA_TENSORBOARD_MAX=2" in refused.json()["detail"]
    assert len(strata.boards.running()) == 2


async def test_idle_boards_are_stopped_and_dead_ones_started_again(tmp_path: Path) -> None:
    now = [1000.0]
    boards = TensorBoards(
        limit=1, idle_seconds=60, start_seconds=120, log_dir=tmp_path / "logs", clock=lambda: now[0]
    )
    write_events(tmp_path / "a" / "chief-0", "loss", [1.0])
    spec = BoardSpec(key="job-1", prefix="/jobs/1/tensorboard", runs=(("", tmp_path / "a"),))
    try:
        board = await boards.open(spec)
        async with httpx.AsyncClient() as client:
            runs = await loaded(
                client, f"{board.base_url}/jobs/1/tensorboard/data/runs", {"chief-0"}
            )
        assert runs == ["chief-0"]
        other = BoardSpec(key="job-2", prefix="/jobs/2/tensorboard", runs=(("", tmp_path / "b"),))
        with pytest.raises(Conflict, match="STRATA_TENSORBOARD_MAX=1"):
            await boards.open(other)

        now[0] += 59
        assert await boards.open(spec) is board  # used: its idle time starts again
        now[0] += 59
        assert await boards.reap() == []
        now[0] += 1
        assert await boards.reap() == ["job-1"]
        assert board.process.returncode is not None and boards.running() == []

        again = await boards.open(spec)
        assert again is not board
        again.process.kill()
        await again.process.wait()
        assert await boards.reap() == ["job-1"]  # dead: forgotten
        third = await boards.open(spec)
        assert third.alive and third.port > 0
    finally:
        await boards.close()
    assert boards.running() == []


async def test_a_board_that_cannot_start_says_why(tmp_path: Path) -> None:
    # An interpreter that exits at once, as a TensorBoard that cannot start would.
    boards = TensorBoards(
        limit=1, idle_seconds=60, start_seconds=60, log_dir=tmp_path, python="/bin/false"
    )
    spec = BoardSpec(key="job-1", prefix="/jobs/1/tensorboard", runs=(("", tmp_path),))
    try:
        with pytest.raises(Exception, match="exited with") as caught:
            await boards.open(spec)
        assert caught.value.status_code == 502  # type: ignore[attr-defined]
        assert boards.running() == []
    finally:
        await boards.close()


def test_the_arguments_name_each_run() -> None:
    single = BoardSpec(
        key="job-3", prefix="/jobs/3/tensorboard", runs=(("", Path("/c/job-3/tensorboard")),)
    )
    assert single.arguments()[:2] == ["--logdir", "/c/job-3/tensorboard"]
    compare = BoardSpec(
        key="compare-3-5",
        prefix="/tensorboard/compare/3-5",
        runs=(("job3", Path("/c/job-3/tensorboard")), ("job5", Path("/c/x/tensorboard"))),
    )
    arguments = compare.arguments()
    assert arguments[:2] == ["--logdir_spec", "job3:/c/job-3/tensorboard,job5:/c/x/tensorboard"]
    assert arguments[arguments.index("--path_prefix") + 1] == "/tensorboard/compare/3-5"
    assert arguments[arguments.index("--host") + 1] == "127.0.0.1"
    with pytest.raises(Conflict, match="comma"):
        BoardSpec(key="x", prefix="/x", runs=(("", Path("/a,b")),)).arguments()


def test_a_board_exits_when_its_server_is_gone() -> None:
    parents = iter([41, 41, 1])  # re-parented to init: the server died
    exits: list[int] = []
    watch_parent(41, getppid=lambda: next(parents), interval=0, exit_now=exits.append)
    assert exits == [0]


def test_a_real_board_exits_when_the_process_that_started_it_dies(tmp_path: Path) -> None:
    started = subprocess.run(
        [
            sys.executable,
            "-c",
            # It names itself as the parent, as the server does, and exits at once.
            "import os, subprocess, sys; print(subprocess.Popen([sys.executable, '-m', "
            "'backend.tensorboard.serve', '--logdir', sys.argv[1], '--host', '127.0.0.1', "
            "'--port', '0'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, "
            "env={**os.environ, sys.argv[2]: str(os.getpid())}).pid)",
            str(tmp_path),
            PARENT_ENV,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    pid = int(started.stdout)
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 60
    while stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z":
        assert time.monotonic() < deadline, f"the orphaned TensorBoard {pid} still runs"
        time.sleep(0.2)
