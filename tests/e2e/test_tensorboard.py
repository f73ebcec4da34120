"""TensorBoard through Strata, and the dashboard's compare page, after two real
parameter-server jobs.

TensorBoard: the chief's event files (batch-level curves included, which tf_keras's own
TensorBoard callback cannot write under parameter servers) are served behind the token at
/jobs/{id}/tensorboard/, and a compare view over the two jobs lists a run per job; checked
through TensorBoard's HTTP API. The dashboard (a real Chromium): the two jobs ticked in the list
open the compare page, with a chart holding one series per job and their spec differences, and
the job page's TensorBoard link opens TensorBoard (the token moved into a cookie). Screenshots
as tests/e2e/test_dashboard.py takes them.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from tests.e2e.test_jobs import example
from tests.support.browser import (
    ARTIFACTS,
    DOCS,
    UPDATE_DOCS,
    chromium,
    screenshots,
    watched_page,
)
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

STEPS = 8
# Two short jobs that differ in their arguments, env and tags (the compare page shows that).
JOBS: list[dict[str, Any]] = [
    {"name": "tb-a", "epochs": 2, "batch": "64", "tags": ["tb", "baseline"], "description": ""},
    {"name": "tb-b", "epochs": 3, "batch": "32", "tags": ["tb"], "description": "smaller batch"},
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("tensorboard") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def jobs(cluster: Cluster) -> list[int]:
    """The two parameter-server digits jobs, run at once, finished."""
    ids = []
    for job in JOBS:
        spec = example("digits_ps.yaml", name=job["name"], tags=job["tags"])
        spec["description"] = job["description"]
        spec["entrypoint"] = [
            *("python", "examples/digits.py", "--epochs", str(job["epochs"])),
            *("--steps-per-epoch", str(STEPS), "--steps-per-execution", "2"),
        ]
        spec["env"] = {"DIGITS_BATCH": job["batch"]}
        spec.pop("export", None)
        spec["restart"] = {"policy": "never"}
        ids.append(cluster.submit(spec)["id"])
    for job_id in ids:
        cluster.wait_status(job_id, "succeeded", timeout=300)
        wait_no_processes(job_id, server=cluster.url)
    return ids


def loaded(http: httpx.Client, url: str, expected: set[str], timeout: float = 60) -> Any:
    """GET `url` until its JSON holds every one of `expected` (TensorBoard loads the files on
    a thread after it starts serving)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = http.get(url)
        assert answer.status_code == 200, answer.text
        if expected <= set(answer.json()) or time.monotonic() > deadline:
            return answer.json()
        time.sleep(0.5)


def test_a_parameter_server_job_s_scalars_in_tensorboard(cluster: Cluster, jobs: list[int]) -> None:
    job_id = jobs[0]
    base = f"{cluster.url}/jobs/{job_id}/tensorboard"
    with httpx.Client(timeout=90) as anonymous:
        refused = anonymous.get(f"{base}/data/runs")
        assert refused.status_code == 401, refused.text

    http = cluster.http
    assert loaded(http, f"{base}/data/runs", {"chief-0"}) == ["chief-0"]
    tags = loaded(http, f"{base}/data/plugin/scalars/tags", {"chief-0"})["chief-0"]
    assert {"batch/loss", "loss", "epoch", "steps_per_sec"} <= set(tags), sorted(tags)
    assert any(tag.startswith("coordinator/") for tag in tags), sorted(tags)
    points = http.get(
        f"{base}/data/plugin/scalars/scalars", params={"run": "chief-0", "tag": "batch/loss"}
    ).json()
    epochs = JOBS[0]["epochs"]
    steps = [step for _, step, _ in points]
    assert steps and steps == sorted(steps) and steps[-1] <= epochs * STEPS, steps
    ends = http.get(
        f"{base}/data/plugin/scalars/scalars", params={"run": "chief-0", "tag": "loss"}
    ).json()
    assert [step for _, step, _ in ends] == [STEPS * (e + 1) for e in range(epochs)]


def test_a_compare_view_over_two_jobs(cluster: Cluster, jobs: list[int]) -> None:
    first, second = jobs
    with httpx.Client(timeout=90) as anonymous:
        compare = f"{cluster.url}/tensorboard/compare?jobs={first},{second}"
        assert anonymous.get(compare).status_code == 401
    redirect = cluster.http.get("/tensorboard/compare", params={"jobs": f"{second},{first}"})
    assert redirect.status_code == 307
    base = redirect.headers["location"].rstrip("/")
    assert base == f"/tensorboard/compare/{first}-{second}"
    expected = {f"job{first}/chief-0", f"job{second}/chief-0"}
    assert set(loaded(cluster.http, f"{base}/data/runs", expected)) == expected
    tags = loaded(cluster.http, f"{base}/data/plugin/scalars/tags", expected)
    assert all("batch/loss" in tags[run] for run in expected), tags


@pytest.fixture(scope="module")
def browser(cluster: Cluster) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser, timeout_ms=30_000) as opened:
        yield opened


def test_the_dashboard_compares_the_two_jobs(cluster: Cluster, jobs: list[int], page: Page) -> None:
    first, second = jobs
    page.goto(f"{cluster.url}/ui/?token={cluster.admin_token}")
    page.get_by_test_id("jobs-page").wait_for()
    compare = page.get_by_test_id("compare-selected")
    assert compare.is_disabled()
    for job_id in jobs:
        page.locator(
            f'[data-testid="job-row"][data-job-id="{job_id}"] [data-testid="job-pick"]'
        ).check()
    assert (
        page.locator(
            f'[data-testid="job-row"][data-job-id="{first}"] [data-testid="job-tag"]'
        ).count()
        == 2
    )
    compare.click()

    page.locator(f'[data-testid="compare-page"][data-jobs="{first},{second}"]').wait_for()
    loss = page.locator('[data-testid="chart-compare-loss"]')
    loss.wait_for()
    assert loss.get_attribute("data-series") == "2"  # a line per job
    assert int(loss.get_attribute("data-points") or 0) == JOBS[0]["epochs"] + JOBS[1]["epochs"]
    assert f"#{first} tb-a" in loss.inner_text() and f"#{second} tb-b" in loss.inner_text()
    batch = page.locator('[data-testid="chart-compare-batch-loss"]')
    assert batch.get_attribute("data-series") == "2"

    rows = page.get_by_test_id("spec-diff-row")
    paths = [rows.nth(i).get_attribute("data-path") for i in range(rows.count())]
    assert paths == ["entrypoint", "env.DIGITS_BATCH", "tags"], paths
    entrypoint = page.locator('[data-testid="spec-diff-row"][data-path="entrypoint"]').inner_text()
    assert "--epochs 2" in entrypoint and "--epochs 3" in entrypoint
    screenshots(page, "compare")

    # By time since each job's start: the same series, on another axis.
    page.get_by_test_id("align-time").click()
    loss.wait_for()
    assert loss.get_attribute("data-series") == "2"

    # The search box filters by tag; the job page's link opens its TensorBoard.
    page.get_by_test_id("nav-jobs").click()
    page.get_by_test_id("jobs-search").fill("tag:baseline")
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=\"job-row\"]').length === 1"
    )
    page.locator(f'[data-testid="job-row"][data-job-id="{first}"] a').click()
    link = page.get_by_test_id("tensorboard-link")
    with page.context.expect_page() as opened:
        link.click()
    board = opened.value
    board.wait_for_load_state()
    assert "token" not in board.url and board.url.endswith(f"/jobs/{first}/tensorboard/")
    board.get_by_text("batch/loss").first.wait_for(timeout=90_000)
    board.wait_for_timeout(1000)  # its charts draw
    board.screenshot(path=str(ARTIFACTS / "tensorboard.png"))
    if UPDATE_DOCS:
        shutil.copyfile(ARTIFACTS / "tensorboard.png", DOCS / "tensorboard.png")
    board.close()
