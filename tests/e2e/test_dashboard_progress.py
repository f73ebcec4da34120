"""A running job's progress where users look for it: a real local cluster (`strata up`, two
agents) trains the digits example under MirroredStrategy, its runtime reports its steps, and the
jobs list and the job page in a real Chromium, `strata jobs show` and `strata jobs ls` show the
step of the total, the percent and an ETA, the pages read again as the job trains. The dashboard
must be built first (`make ui`; `make test` does it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Browser, Locator, Page

from tests.support.browser import (
    ARTIFACTS,
    chromium,
    require_browser_and_dashboard,
    wait_number_above,
    watched_page,
)
from tests.support.cli import run_strata
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# Far more steps than the test waits for (minutes at hundreds of steps a second): it is
# cancelled once everything was seen. A checkpoint is written at each epoch's end.
EPOCHS, STEPS_PER_EPOCH = 100, 1000
TOTAL = EPOCHS * STEPS_PER_EPOCH


def job_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / "digits_mirrored.yaml").read_text())
    spec["name"] = "progress-shown"
    spec["entrypoint"] = [
        "python",
        "examples/digits.py",
        "--epochs",
        str(EPOCHS),
        "--steps-per-epoch",
        str(STEPS_PER_EPOCH),
    ]
    spec["restart"] = {"policy": "never"}
    return spec


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_browser_and_dashboard()
    with local_cluster(tmp_path_factory.mktemp("dashboard-progress") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def browser(cluster: Cluster) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser) as opened:
        yield opened


@pytest.fixture(scope="module")
def training(cluster: Cluster) -> Iterator[int]:
    """A job that trains for the whole module, with a rate and an ETA reported already."""
    job_id: int = cluster.submit(job_spec())["id"]
    try:

        def estimated(job: dict[str, Any]) -> bool:
            progress = job["progress"]
            assert job["status"] not in ("failed", "succeeded", "cancelled"), job["reason"]
            return (
                progress is not None
                and progress["total_steps"] == TOTAL
                and progress["eta_seconds"] is not None
            )

        cluster.wait_for(job_id, estimated, timeout=240, what="running with an ETA")
        yield job_id
    finally:
        cluster.http.post(f"/jobs/{job_id}/cancel")
        wait_no_processes(job_id, server=cluster.url)


def strata(cluster: Cluster, *args: str) -> str:
    env = {"STRATA_SERVER": cluster.url, "STRATA_TOKEN": cluster.admin_token, "COLUMNS": "200"}
    done = run_strata(args, env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def step_of_total(text: str) -> int:
    """The step in '1520 / 20000' (or '1520/20000'), checked against the job's total."""
    found = re.search(r"(\d+) ?/ ?(\d+)", text)
    assert found is not None, text
    assert int(found.group(2)) == TOTAL, text
    return int(found.group(1))


def assert_percent_and_eta(text: str) -> None:
    assert re.search(r"\b\d{1,3}%", text), text
    assert re.search(r"ETA (\d+[smhd] ?)+", text), text


def test_the_jobs_list_shows_the_progress_of_a_running_job(
    cluster: Cluster, training: int, page: Page
) -> None:
    page.goto(f"{cluster.url}/ui/?token={cluster.admin_token}#/jobs")
    row_selector = f'[data-testid="job-row"][data-job-id="{training}"]'
    row = page.locator(row_selector)
    cell: Locator = row.get_by_test_id("job-progress-cell")
    cell.wait_for()
    assert cell.get_attribute("data-total-steps") == str(TOTAL)
    text = cell.inner_text()
    assert_percent_and_eta(text)
    step = step_of_total(text)
    assert int(cell.get_attribute("data-percent") or -1) == step * 100 // TOTAL
    assert row.get_by_role("progressbar").count() == 1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "progress-jobs-light.png"))

    # The list reads the job again while it runs: the step moves on without a reload.
    selector = f'{row_selector} [data-testid="job-progress-cell"]'
    later = wait_number_above(page, selector, "data-step", step, timeout=60)
    assert step_of_total(cell.inner_text()) >= later


def test_the_job_page_shows_steps_epoch_rate_and_eta(
    cluster: Cluster, training: int, page: Page
) -> None:
    page.goto(f"{cluster.url}/ui/?token={cluster.admin_token}#/jobs/{training}")
    strip = page.get_by_test_id("run-progress")
    strip.wait_for()
    text = strip.inner_text()
    assert_percent_and_eta(text)
    step = step_of_total(page.get_by_test_id("run-progress-steps").inner_text())
    assert re.fullmatch(r"\d{1,3}%", page.get_by_test_id("run-progress-percent").inner_text())
    assert re.search(rf"epoch \d+ / {EPOCHS}\b", text), text
    assert re.search(r"[\d.]+ steps/s|\d+[smh]( \d+s)?/step", text), text
    assert strip.get_by_role("progressbar").count() == 1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "progress-job-light.png"))

    # The page reads the job again as it trains.
    later = wait_number_above(page, '[data-testid="run-progress"]', "data-step", step, timeout=60)
    assert later > step


def test_the_cli_shows_the_progress(cluster: Cluster, training: int) -> None:
    shown = strata(cluster, "jobs", "show", str(training))
    line = next((li for li in shown.splitlines() if li.startswith("progress: ")), None)
    assert line is not None, shown
    assert re.fullmatch(
        rf"progress: step \d+ of {TOTAL} \(\d{{1,3}}%\), epoch \d+ of {EPOCHS}, "
        r"(\S+ steps/s|\S+/step), ETA (\d+[smhd])+(, \w+)?",
        line,
    ), line

    listed = strata(cluster, "jobs", "ls")
    row = next((li for li in listed.splitlines() if f" {training} " in f" {li} "), None)
    assert row is not None, listed
    assert re.search(rf"\b\d+/{TOTAL} \d{{1,3}}% \S+ ETA (\d+[smhd])+", row), row
