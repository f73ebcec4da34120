"""Teams in the dashboard, in a real Chromium against a real local cluster: a user signs in with
their own token, switches between their projects, sees only those projects' jobs (another
project's job is "does not exist"), may act only where their role allows, and the job's events
say who did what. The jobs ask for more GPUs than the cluster has, so they wait and no
TensorFlow process is started. Screenshots as tests/e2e/test_dashboard.py takes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from tests.support.browser import chromium, require_browser_and_dashboard, screenshots, watched_page
from tests.support.cluster import Cluster, local_cluster

pytestmark = pytest.mark.e2e


def waiting_spec(name: str, project: str) -> dict[str, Any]:
    """A job that can never be placed here (2 agents with 2 GPUs each): it waits, saying why."""
    return {
        "name": name,
        "project": project,
        "strategy": "multi_worker_mirrored",
        "entrypoint": ["python", "-c", "print('never runs')"],
        "replicas": {"worker": {"count": 2, "gpus": 8}},
    }


class Team:
    """Three projects and two users: alice is a member of vision and a viewer of nlp; bob is
    a member of nlp; project secret has no member but the admin."""

    def __init__(self, cluster: Cluster) -> None:
        admin = cluster.http
        for project in ("vision", "nlp", "secret"):
            created = admin.post("/projects", json={"name": project})
            assert created.status_code == 201, created.text
        self.tokens: dict[str, str] = {}
        memberships = {"alice": {"vision": "member", "nlp": "viewer"}, "bob": {"nlp": "member"}}
        for user, roles in memberships.items():
            assert admin.post("/users", json={"name": user}).status_code == 201
            for project, role in roles.items():
                answer = admin.put(f"/projects/{project}/members/{user}", json={"role": role})
                assert answer.status_code == 200, answer.text
            token = admin.post(f"/users/{user}/tokens", json={"name": "browser"})
            assert token.status_code == 201, token.text
            self.tokens[user] = token.json()["token"]
        self.jobs = {
            "vision": self.submit(cluster, "alice", waiting_spec("vision-resnet", "vision")),
            "nlp": self.submit(cluster, "bob", waiting_spec("nlp-bert", "nlp")),
            "secret": cluster.submit(waiting_spec("secret-plan", "secret"))["id"],
        }

    def submit(self, cluster: Cluster, user: str, spec: dict[str, Any]) -> int:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"}
        answer = httpx.post(f"{cluster.url}/jobs", json=spec, headers=headers, timeout=30)
        assert answer.status_code == 201, answer.text
        assert answer.json()["submitted_by"] == user
        job_id: int = answer.json()["id"]
        return job_id


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_browser_and_dashboard()
    with local_cluster(tmp_path_factory.mktemp("teams") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def team(cluster: Cluster) -> Team:
    return Team(cluster)


@pytest.fixture(scope="module")
def browser(cluster: Cluster) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser) as opened:
        yield opened


def shown_jobs(page: Page) -> set[int]:
    rows = page.get_by_test_id("job-row")
    return {int(rows.nth(i).get_attribute("data-job-id") or 0) for i in range(rows.count())}


def wait_shown_jobs(page: Page, expected: set[int]) -> None:
    page.wait_for_function(
        """ids => {
            const shown = [...document.querySelectorAll('[data-testid="job-row"]')]
                .map(row => Number(row.dataset.jobId)).sort((a, b) => a - b);
            return JSON.stringify(shown) === JSON.stringify(ids);
        }""",
        arg=sorted(expected),
    )


def test_a_user_sees_their_projects_and_acts_as_their_role_allows(
    cluster: Cluster, team: Team, page: Page
) -> None:
    vision, nlp, secret = team.jobs["vision"], team.jobs["nlp"], team.jobs["secret"]
    page.goto(f"{cluster.url}/ui/?token={team.tokens['alice']}")
    page.get_by_test_id("jobs-page").wait_for()
    assert page.get_by_test_id("signed-in-as").inner_text() == "alice"

    # The switcher offers her two projects with her role in each, and nothing else.
    switcher = page.get_by_test_id("project-switcher")
    options = switcher.locator("option")
    options.nth(2).wait_for(state="attached")
    assert [options.nth(i).inner_text() for i in range(options.count())] == [
        "All projects",
        "nlp · viewer",
        "vision · member",
    ]
    # All her projects: the vision and nlp jobs, never the secret one.
    wait_shown_jobs(page, {vision, nlp})
    row = page.locator(f'[data-testid="job-row"][data-job-id="{vision}"]')
    assert "alice" in row.get_by_test_id("job-project").inner_text()
    switcher.select_option("vision")
    wait_shown_jobs(page, {vision})
    page.get_by_test_id("toggle-submit").click()
    assert page.get_by_test_id("submit-project").input_value() == "vision"
    screenshots(page, "teams-jobs")

    # Another project's job is exactly a job that does not exist.
    page.goto(f"{cluster.url}/ui/#/jobs/{secret}")
    page.get_by_text(f"Job {secret} does not exist", exact=True).wait_for()

    # A viewer of nlp: bob's job is there, its controls are not hers to use.
    page.goto(f"{cluster.url}/ui/#/jobs/{nlp}")
    page.get_by_test_id("job-page").wait_for()
    cancel = page.get_by_test_id("cancel-job")
    assert cancel.is_disabled()
    assert cancel.get_attribute("title") == "Read only: you are a viewer of project nlp"
    assert "by bob" in page.get_by_test_id("job-submitted").inner_text()

    # Her own project's job: she cancels it, and the events say she did.
    page.goto(f"{cluster.url}/ui/#/jobs/{vision}")
    page.get_by_test_id("job-page").wait_for()
    assert page.get_by_test_id("job-project").inner_text() == "project vision"
    page.get_by_test_id("cancel-job").click()
    page.get_by_test_id("confirm-ok").click()
    page.locator('[data-testid="job-status"][data-status="cancelled"]').wait_for()
    page.locator('[data-testid="event"][data-actor="alice"]').first.wait_for()
    actors = {event["actor"] for event in cluster.events(vision) if event.get("actor") is not None}
    assert actors == {"alice"}, cluster.events(vision)
    screenshots(page, "teams-job")
    assert cluster.job(nlp)["status"] == "pending", "alice's cancel touched bob's job"
