"""Draining a host from the dashboard, in a real Chromium against a real local cluster (`strata
up`, two idle agents): the cluster page drains a host through its confirm dialog, shows it
drained as `strata hosts` words it, and puts it back in service; a viewer token sees the
controls off. No job runs, so no TensorFlow process is started. The dashboard must be built
first (`make ui`; `make test` does it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.support.browser import chromium, require_browser_and_dashboard, watched_page
from tests.support.cluster import Cluster, local_cluster

pytestmark = pytest.mark.e2e

HOST = "local-0"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_browser_and_dashboard()
    with local_cluster(tmp_path_factory.mktemp("dashboard-hosts") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def browser(cluster: Cluster) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser) as opened:
        yield opened


def host(cluster: Cluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = {h["name"]: h for h in cluster.http.get("/hosts").json()}[name]
    return found


def card(page: Page, name: str) -> Locator:
    return page.locator(f'[data-testid="host-card"][data-host="{name}"]')


def test_drain_a_host_and_put_it_back(cluster: Cluster, page: Page) -> None:
    page.goto(f"{cluster.url}/ui/?token={cluster.admin_token}#/cluster")
    page.get_by_test_id("cluster-page").wait_for()
    local = card(page, HOST)
    expect(local).to_have_attribute("data-drain", "in-service")
    assert local.get_by_test_id("host-drain-state").count() == 0

    # Changing my mind in the dialog drains nothing.
    local.get_by_test_id("host-drain").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text(f"Drain {HOST}?")
    page.get_by_test_id("confirm-cancel").click()
    expect(dialog).to_have_count(0)
    assert host(cluster, HOST)["draining_since"] is None

    # Drained with a deadline of one minute: idle, it is drained at once.
    local.get_by_test_id("host-drain").click()
    page.get_by_test_id("confirm-choice").select_option("60")
    page.get_by_test_id("confirm-ok").click()
    expect(local).to_have_attribute("data-drain", "drained")
    expect(local.get_by_test_id("host-drain-state")).to_have_text("drained")
    outcome = page.locator(
        f'[data-testid="action-outcome"][data-action="drain {HOST}"][data-state="ok"]'
    )
    expect(outcome).to_contain_text(f"Draining {HOST}: online, drained.")
    drained = host(cluster, HOST)
    assert drained["draining_since"] is not None and drained["live_tasks"] == 0, drained
    assert host(cluster, "local-1")["draining_since"] is None, "the other host was drained"
    # It stays drained across the page's next reads of the cluster.
    page.reload()
    expect(card(page, HOST)).to_have_attribute("data-drain", "drained")

    # Undrained: back in service, on the page and on the server.
    card(page, HOST).get_by_test_id("host-undrain").click()
    expect(card(page, HOST)).to_have_attribute("data-drain", "in-service")
    expect(card(page, HOST).get_by_test_id("host-drain")).to_be_enabled()
    expect(
        page.locator(
            f'[data-testid="action-outcome"][data-action="undrain {HOST}"][data-state="ok"]'
        )
    ).to_contain_text(f"{HOST} is in service: online.")
    assert host(cluster, HOST)["draining_since"] is None


def test_a_viewer_token_may_not_drain(cluster: Cluster, page: Page) -> None:
    created = cluster.http.post("/tokens", json={"name": "hosts-wall-screen", "kind": "viewer"})
    assert created.status_code == 201, created.text
    page.goto(f"{cluster.url}/ui/?token={created.json()['token']}#/cluster")
    page.get_by_test_id("read-only").wait_for()
    drain = card(page, HOST).get_by_test_id("host-drain")
    expect(drain).to_be_disabled()
    assert "viewer token" in (drain.get_attribute("title") or "")
