"""Host health end to end: a real server (`strata up`, one agent) and a second real agent whose
disk probe finds a fault (its --min-free-disk is the whole disk, so the real free space is
below it). The server cordons that host with the probe's reason, a job that only fits there
waits, an operator clears the cordon (acknowledging the fault), and the job runs there. The
cluster page shows the badge and clears it in Chromium, where one is installed and the
dashboard built."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.browser import chromium, require_browser_and_dashboard, watched_page
from tests.support.cluster import Cluster, local_cluster

pytestmark = pytest.mark.e2e

SICK = "sick-0"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("host-health") / "data", agents=1) as running:
        running.start_agent(SICK, 2, "26000-26099", env={"STRATA_AGENT_MIN_FREE_DISK": "100%"})
        running.wait_host(SICK, "online")
        yield running


def host(cluster: Cluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = {h["name"]: h for h in cluster.http.get("/hosts").json()}[name]
    return found


def wait_cordoned(cluster: Cluster, name: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = host(cluster, name)
        if found["cordon_reason"] is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{name} was not cordoned within {timeout}s: {host(cluster, name)}")


def test_a_faulty_host_is_cordoned_takes_no_job_and_an_operator_clears_it(
    cluster: Cluster,
) -> None:
    sick = wait_cordoned(cluster, SICK)
    assert sick["cordon_cause"] == "fault"
    assert sick["cordon_reason"].endswith("free, below 100%"), sick["cordon_reason"]
    [fault] = sick["faults"]
    assert fault["kind"] == "disk_space"
    assert host(cluster, "local-0")["cordon_reason"] is None  # its disk is fine
    metrics = cluster.http.get("/metrics").text
    assert f'strata_host_cordoned{{cause="fault",host="{SICK}"}} 1.0' in metrics

    # The healthy host is cordoned by hand: the job then fits nowhere but on the sick one.
    manual = cluster.http.post("/hosts/local-0/cordon", json={"reason": "kept for the test"})
    assert manual.status_code == 200, manual.text
    job = cluster.submit(
        {
            "name": "health-e2e",
            "strategy": "mirrored",
            "entrypoint": ["python", "-c", "print('ran')"],
            "replicas": {"chief": {"count": 1, "gpus": 2}},
        }
    )
    waiting = cluster.wait_for(job["id"], lambda j: bool(j["reason"]), 30, "given a reason")
    assert waiting["status"] == "pending", waiting
    assert all(t["host"] is None for t in waiting["tasks"])

    cleared = cluster.http.post(f"/hosts/{SICK}/uncordon")
    assert cleared.status_code == 200 and cleared.json()["cordon_reason"] is None
    done = cluster.wait_status(job["id"], "succeeded", timeout=120)
    assert [t["host"] for t in done["tasks"]] == [SICK]
    # The fault is still reported, but acknowledged: the host stays in service.
    again = host(cluster, SICK)
    assert again["cordon_reason"] is None and again["faults"][0]["kind"] == "disk_space"
    assert cluster.http.post("/hosts/local-0/uncordon").status_code == 200


def test_the_cluster_page_shows_the_cordon_and_clears_it(cluster: Cluster) -> None:
    require_browser_and_dashboard()
    reason = "fan noise"
    assert cluster.http.post(f"/hosts/{SICK}/cordon", json={"reason": reason}).status_code == 200
    with chromium() as browser, watched_page(browser) as page:
        page.goto(f"{cluster.url}/ui/?token={cluster.admin_token}#/cluster")
        page.get_by_test_id("cluster-page").wait_for()
        card = page.locator(f'[data-testid="host-card"][data-host="{SICK}"]')
        badge = card.get_by_test_id("host-cordon")
        expect(badge).to_have_text(f"cordoned: {reason}")
        expect(badge).to_have_attribute("data-cause", "manual")
        assert "Faults now:" in (badge.get_attribute("title") or "")
        local = page.locator('[data-testid="host-card"][data-host="local-0"]')
        expect(local.get_by_test_id("host-cordon")).to_have_count(0)
        card.get_by_test_id("host-uncordon").click()
        expect(badge).to_have_count(0)
    assert host(cluster, SICK)["cordon_reason"] is None
