"""The dashboard in a real Chromium against a real local cluster (`strata up`, two agents).

One story drives a parameter-server job from the submit form to success: live loss points, a
live log, checkpoint now, the sidecar evaluator, a worker restarted from the topology view. On
the way it saves screenshots of every page in both themes to test-artifacts/screenshots/ (and,
with STRATA_UPDATE_SCREENSHOTS=1, over the ones the README shows in docs/screenshots/). The
dashboard must be built first (`make ui`; `make test` does it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Browser, Page, expect

from backend.code.archive import pack
from tests.support.browser import (
    ARTIFACTS,
    chromium,
    require_browser_and_dashboard,
    screenshots,
    set_theme,
    wait_number_above,
    watched_page,
)
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# Long enough for every step of the story to happen while it trains (about 1 to 2 minutes
# here), short enough to keep the test near 3 minutes.
EPOCHS, STEPS_PER_EPOCH = 20, 300

BAD_SPEC = """name: bad-ps
strategy: parameter_server
entrypoint: [python, examples/digits.py]
replicas:
  chief: {count: 1}
  worker: {count: 2}
  ps: {count: 0}
"""


def job_spec_yaml() -> str:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / "digits_ps.yaml").read_text())
    spec["name"] = "dashboard-ps"
    spec["entrypoint"] = [
        "python",
        "examples/digits.py",
        "--epochs",
        str(EPOCHS),
        "--steps-per-epoch",
        str(STEPS_PER_EPOCH),
    ]
    spec["checkpoint"] = {"every_epochs": 1, "keep": 5}
    return "# submitted by tests/e2e/test_dashboard.py\n" + yaml.safe_dump(spec, sort_keys=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_browser_and_dashboard()
    with local_cluster(tmp_path_factory.mktemp("dashboard") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def browser(cluster: Cluster) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser) as opened:
        yield opened


def test_login_theme_and_a_bad_spec(cluster: Cluster, page: Page) -> None:
    # No token: the login page. A wrong token is refused, the right one signs in.
    page.goto(f"{cluster.url}/ui/")
    page.get_by_test_id("login-page").wait_for()
    screenshots(page, "login")
    page.get_by_test_id("token-input").fill("not-the-token")
    page.get_by_test_id("login-submit").click()
    page.get_by_test_id("login-error").wait_for()
    page.get_by_test_id("token-input").fill(cluster.admin_token)
    page.get_by_test_id("login-submit").click()
    page.get_by_test_id("jobs-page").wait_for()

    # The theme is remembered across reloads.
    set_theme(page, "dark")
    page.reload()
    page.get_by_test_id("jobs-page").wait_for()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    set_theme(page, "light")

    # A spec the server refuses: its message is shown by the field it names.
    page.get_by_test_id("spec-editor").fill(BAD_SPEC)
    page.get_by_test_id("submit-job").click()
    error = page.locator('[data-testid="spec-error"][data-field="replicas.ps.count"]')
    error.wait_for()
    assert "ps" in error.inner_text()
    assert page.get_by_test_id("spec-error-line").first.get_attribute("data-line") == "7"
    assert cluster.http.get("/jobs").json()["total"] == 0, "the bad spec made a job"

    # A job that cannot be placed waits with a reason; cancelling asks first.
    unplaceable: dict[str, Any] = yaml.safe_load(job_spec_yaml())
    unplaceable["name"] = "too-big"
    unplaceable["replicas"]["worker"]["gpus"] = 8
    waiting = cluster.submit(unplaceable)
    page.goto(f"{cluster.url}/ui/#/jobs/{waiting['id']}")
    page.locator('[data-testid="job-status"][data-status="pending"]').wait_for()
    # The reason changes without an event (placement retries): the page polls for it.
    page.get_by_test_id("job-reason").filter(has_text="GPU").wait_for()
    assert page.get_by_test_id("restart-job").is_disabled()
    # Suspended, it gives up its place in the queue; resumed, it waits again.
    page.get_by_test_id("suspend-toggle").click()
    page.locator('[data-testid="job-status"][data-status="suspended"]').wait_for()
    page.locator('[data-testid="suspend-toggle"][data-suspended="true"]').wait_for()
    assert cluster.job(waiting["id"])["status"] == "suspended"
    page.get_by_test_id("suspend-toggle").click()
    page.locator('[data-testid="job-status"][data-status="pending"]').wait_for()
    page.locator('[data-testid="action-outcome"][data-action="suspend"][data-state="ok"]').filter(
        has_text="Job resumed"
    ).wait_for()
    page.get_by_test_id("cancel-job").click()
    page.get_by_test_id("confirm-cancel").click()  # changed my mind
    assert page.get_by_test_id("confirm-dialog").count() == 0
    assert cluster.job(waiting["id"])["status"] == "pending"
    page.get_by_test_id("cancel-job").click()
    page.get_by_test_id("confirm-ok").click()
    page.locator('[data-testid="action-outcome"][data-action="cancel"][data-state="ok"]').wait_for()
    page.locator('[data-testid="job-status"][data-status="cancelled"]').wait_for()
    assert cluster.job(waiting["id"])["status"] == "cancelled"

    # A token the server stops accepting sends the page back to the login.
    page.evaluate("sessionStorage.setItem('strata.token', 'revoked')")
    # To another page by its address, not by its link: the job page's own polling may meet the
    # refusal first and replace the page (and the link) with the login already.
    page.evaluate("location.hash = '#/cluster'")
    page.get_by_test_id("login-page").wait_for()
    assert "refused the token" in page.get_by_test_id("login-reason").inner_text()


def test_a_viewer_token_sees_everything_and_changes_nothing(cluster: Cluster, page: Page) -> None:
    created = cluster.http.post("/tokens", json={"name": "wall-screen", "kind": "viewer"})
    assert created.status_code == 201, created.text
    viewer = created.json()["token"]
    unplaceable: dict[str, Any] = yaml.safe_load(job_spec_yaml())
    unplaceable["name"] = "seen-by-a-viewer"
    unplaceable["replicas"]["worker"]["gpus"] = 8  # stays pending: nothing to run
    waiting = cluster.submit(unplaceable)
    controls = ("checkpoint-now", "evaluator-toggle", "suspend-toggle", "restart-job", "cancel-job")
    try:
        # The viewer sees the job, and every control is off, saying why.
        page.goto(f"{cluster.url}/ui/?token={viewer}#/jobs/{waiting['id']}")
        page.locator('[data-testid="job-status"][data-status="pending"]').wait_for()
        page.get_by_test_id("read-only").wait_for()
        for control in controls:
            expect(page.get_by_test_id(control)).to_be_disabled()
            title = page.get_by_test_id(control).get_attribute("title")
            assert title is not None and "viewer token" in title, (control, title)
        page.goto(f"{cluster.url}/ui/#/jobs")
        page.get_by_test_id("toggle-submit").click()
        expect(page.get_by_test_id("submit-job")).to_be_disabled()

        # The same page under the admin token: no tag, and cancel is on.
        page.evaluate("token => sessionStorage.setItem('strata.token', token)", cluster.admin_token)
        page.goto(f"{cluster.url}/ui/#/jobs/{waiting['id']}")
        page.reload()
        page.locator('[data-testid="job-status"][data-status="pending"]').wait_for()
        expect(page.get_by_test_id("cancel-job")).to_be_enabled()
        assert page.get_by_test_id("read-only").count() == 0
    finally:
        cluster.http.post(f"/jobs/{waiting['id']}/cancel")


@pytest.mark.timeout(480)
def test_a_job_from_the_form_to_success(cluster: Cluster, page: Page) -> None:
    page.goto(f"{cluster.url}/ui/?token={cluster.admin_token}")
    page.get_by_test_id("jobs-page").wait_for()
    assert "token" not in page.url, "the token stays in the address bar"

    # Submit from the form (closed while there are jobs); the dashboard opens the job.
    page.get_by_test_id("toggle-submit").click()
    page.get_by_test_id("spec-editor").fill(job_spec_yaml())
    page.get_by_test_id("submit-job").click()
    page.wait_for_function("/^#\\/jobs\\/\\d+$/.test(location.hash)")
    job_id = int(page.evaluate("location.hash").rsplit("/", 1)[1])
    page.locator('[data-testid="job-status"][data-status="running"]').wait_for(timeout=120_000)
    # Its agent's CPU and memory samples reach the topology (live, or with the job's reads).
    usage = page.locator('[data-testid="task-chief:0"] [data-testid="task-usage"]')
    usage.wait_for(timeout=30_000)
    assert usage.inner_text().startswith("CPU ")

    # The loss chart gains points while it trains.
    loss = '[data-testid="chart-loss"]'
    first = wait_number_above(page, loss, "data-points", 0, timeout=90)
    wait_number_above(page, loss, "data-points", first, timeout=60)

    # The chief's live log: lines arrive.
    page.get_by_test_id("task-chief:0").click()
    viewer = '[data-testid="log-viewer"][data-task="chief:0"]'
    page.locator(viewer).wait_for()
    lines = wait_number_above(page, viewer, "data-lines", 0, timeout=30)
    wait_number_above(page, viewer, "data-lines", lines, timeout=60)
    assert page.get_by_test_id("log-line").count() > 0

    # Checkpoint now: progress, then the result, and the new row in the table.
    page.get_by_test_id("checkpoint-now").click()
    done = page.locator('[data-testid="action-outcome"][data-action="checkpoint"][data-state="ok"]')
    done.wait_for(timeout=60_000)
    name = next(
        c["name"]
        for c in cluster.http.get(f"/jobs/{job_id}/checkpoints").json()
        if c["trigger"] == "command"
    )
    assert name in done.inner_text()
    page.locator(
        f'[data-testid="checkpoint-row"][data-name="{name}"][data-trigger="command"]'
    ).wait_for()

    # The sidecar evaluator: its task appears in the topology, its points in the eval chart.
    page.get_by_test_id("evaluator-toggle").click()
    page.locator(
        '[data-testid="action-outcome"][data-action="evaluator"][data-state="ok"]'
    ).wait_for(timeout=30_000)
    page.locator('[data-testid="task-evaluator:0"][data-status="running"]').wait_for(timeout=60_000)
    wait_number_above(page, '[data-testid="chart-eval"]', "data-points", 0, timeout=120)

    # Restart a worker from the topology view, through the confirmation dialog.
    page.get_by_test_id("restart-task-worker:1").click()
    dialog = page.get_by_test_id("confirm-dialog")
    dialog.wait_for()
    assert "worker:1" in dialog.inner_text()
    page.get_by_test_id("confirm-ok").click()
    page.locator('[data-testid="event"][data-kind="restart"][data-task="worker:1"]').wait_for(
        timeout=30_000
    )
    page.locator('[data-testid="task-worker:1"][data-attempt="1"]').wait_for(timeout=30_000)
    page.locator('[data-testid="task-worker:1"][data-status="running"]').wait_for(timeout=60_000)
    assert cluster.job(job_id)["status"] == "running", "a PS worker restart stops the job"
    page.screenshot(path=str(ARTIFACTS / "job-full-page.png"), full_page=True)  # for review
    page.evaluate("window.scrollTo(0, 0)")
    screenshots(page, "job")

    # The cluster: both hosts, and the GPUs the job's workers hold.
    page.get_by_test_id("nav-cluster").click()
    page.get_by_test_id("cluster-page").wait_for()
    assert page.get_by_test_id("host-card").count() == 2
    page.locator('[data-testid="device"][data-task^="' + f"{job_id}/" + '"]').first.wait_for()
    # The tasks' CPU and memory; the simulated GPUs report no utilisation.
    page.get_by_test_id("task-usage").first.wait_for()
    assert page.get_by_test_id("gpu-usage").count() == 0
    screenshots(page, "cluster")

    # The jobs list shows it live.
    page.get_by_test_id("nav-jobs").click()
    page.locator(f'[data-testid="job-row"][data-job-id="{job_id}"]').wait_for()
    page.get_by_test_id("toggle-submit").click()  # the list alone, full width
    page.get_by_test_id("submit-form").wait_for(state="hidden")
    screenshots(page, "jobs")

    # Back on the job: it succeeds, and the page says so without a reload.
    page.locator(f'[data-testid="job-row"][data-job-id="{job_id}"] a').click()
    page.locator('[data-testid="job-status"][data-status="succeeded"]').wait_for(timeout=240_000)
    assert cluster.job(job_id)["status"] == "succeeded"
    wait_no_processes(job_id, server=cluster.url)


def bundle_project(root: Path) -> Path:
    """A code dir with more files than the job page lists before it folds them."""
    (root / "model").mkdir(parents=True)
    (root / "configs").mkdir()
    (root / "train.py").write_text("print('training from a bundle')\n")
    (root / "README.md").write_text("# A project submitted as a code bundle\n")
    (root / "model" / "__init__.py").write_text("")
    for name in ("layers", "losses", "metrics", "schedule", "data"):
        (root / "model" / f"{name}.py").write_text(f"# {name}\n" * 40)
    for size in ("small", "base", "large", "xl"):
        (root / "configs" / f"{size}.yaml").write_text(f"size: {size}\n")
    return root


def test_a_job_submitted_by_bundle_digest_shows_its_bundle(
    cluster: Cluster, page: Page, tmp_path: Path
) -> None:
    bundle = pack(bundle_project(tmp_path / "project"))
    try:
        put = cluster.http.put(f"/code/{bundle.sha256}", content=bundle.file.read())
    finally:
        bundle.close()
    assert put.status_code in (200, 201), put.text
    manifest = cluster.http.get(f"/code/{bundle.sha256}/manifest").json()
    spec: dict[str, Any] = yaml.safe_load(job_spec_yaml())
    spec["name"] = "from-a-bundle"
    spec["replicas"]["worker"]["gpus"] = 8  # stays pending: the page is the point, not training
    jobs_before = cluster.http.get("/jobs").json()["total"]

    page.goto(f"{cluster.url}/ui/?token={cluster.admin_token}")
    page.get_by_test_id("jobs-page").wait_for()
    if not page.get_by_test_id("submit-form").is_visible():
        page.get_by_test_id("toggle-submit").click()
    page.get_by_test_id("spec-editor").fill(yaml.safe_dump(spec, sort_keys=False))

    # A digest the server does not know: its message, beside the field, and no job.
    unknown = "0" * 64
    page.get_by_test_id("bundle-digest-input").fill(unknown)
    page.get_by_test_id("submit-job").click()
    refused = page.locator('[data-testid="bundle-error"][data-field="code.sha256"]')
    refused.wait_for()
    assert f"no code bundle {unknown}" in refused.inner_text()
    assert cluster.http.get("/jobs").json()["total"] == jobs_before, "an unknown bundle made a job"
    page.get_by_test_id("submit-job").scroll_into_view_if_needed()
    screenshots(page, "submit-bundle")

    # The bundle the server has: the job runs in it, and its page shows what it holds.
    page.get_by_test_id("bundle-digest-input").fill(bundle.sha256)
    page.get_by_test_id("submit-job").click()
    page.wait_for_function("/^#\\/jobs\\/\\d+$/.test(location.hash)")
    job_id = int(page.evaluate("location.hash").rsplit("/", 1)[1])
    try:
        assert cluster.job(job_id)["spec"]["code"] == {"sha256": bundle.sha256}
        card = page.get_by_test_id("code-bundle")
        card.get_by_test_id("bundle-size").wait_for()
        assert card.get_by_test_id("bundle-digest").get_attribute("data-sha256") == bundle.sha256
        assert card.get_by_test_id("bundle-size").get_attribute("data-bytes") == str(bundle.size)
        assert f"{manifest['files']} files" in card.get_by_test_id("bundle-size").inner_text()
        files = card.get_by_test_id("bundle-file")
        assert files.count() == 12 < manifest["members"]  # folded
        assert card.get_by_test_id("bundle-more").count() == 0  # the server lists them all
        screenshots(page, "job-bundle")
        card.get_by_test_id("bundle-toggle").click()
        expect(files).to_have_count(manifest["members"])
        listed = [files.nth(i).get_attribute("data-path") for i in range(files.count())]
        assert listed == [member["path"] for member in manifest["listed"]]
        assert "train.py" in listed and "model/layers.py" in listed
    finally:
        cluster.http.post(f"/jobs/{job_id}/cancel")
