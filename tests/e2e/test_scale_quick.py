"""The scale benchmark's quick form in the e2e tier: 100 simulated agents speaking the real
protocol and 100 parameter-server jobs (1,000 tasks) against a real `strata server`, on SQLite
and on PostgreSQL, so that a change that breaks placing, starting or serving at this size is
seen here rather than in the next `make bench`. Its figures are bench/'s to report; this test
checks that the run completes and measured what it says."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from bench.harness import postgres_database
from bench.profiling import find_pyspy
from bench.scale import measure

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

AGENTS = 100


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_hundred_agents_run_a_hundred_jobs(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with contextlib.ExitStack() as stack:
        url = (
            stack.enter_context(postgres_database(request.getfixturevalue("postgres_admin_url")))
            if database == "postgresql"
            else None
        )
        result = measure(
            AGENTS, requests=20, place_timeout=300, database_url=url, profiles=tmp_path
        )
    assert "failed" not in result, result.get("failed")
    assert result["database"] == database
    assert (result["agents"], result["tasks"]) == (AGENTS, 10 * AGENTS)
    for key in ("get_jobs", "get_cluster", "get_job", "post_jobs"):
        assert result[key]["n"] >= 5 and result[key]["p99_ms"] >= result[key]["p50_ms"] > 0, key
    assert result["place_and_start_seconds"] >= result["submit_seconds"] > 0
    assert result["server_rss_mib"] > 0
    # The controller's lock was held by the submissions and the passes that placed them, and
    # by nothing for longer than the window itself.
    held = result["placing_lock_held_seconds"]
    assert held["request"] > 0 and held["pass"] > 0, held
    assert sum(held.values()) <= result["place_and_start_seconds"] + 1, held
    assert len(result["load_average"]) == 2  # the page says how shared the machine was


def test_the_run_that_samples_placement_ends_once_every_job_runs(tmp_path: Path) -> None:
    """The second run of a point (bench.scale's main): the placement window is sampled, where
    py-spy is installed (the bench extra; the test suite does not need it), and the run ends
    once every job runs, with its own times."""
    result = measure(AGENTS, requests=20, place_timeout=300, profiles=tmp_path, placing_only=True)
    assert "failed" not in result, result.get("failed")
    assert result["place_and_start_seconds"] >= result["submit_seconds"] > 0
    held = result["placing_lock_held_seconds"]
    assert held["request"] > 0 and held["pass"] > 0, held
    assert "get_jobs" not in result and "full_collections" not in result  # ended there
    if find_pyspy() is None:
        assert result["placing_profile"] is None
    else:
        assert result["placing_profile"]["busy_samples"] > 0
        assert (tmp_path / f"scale-sqlite-{AGENTS}-placing.txt").stat().st_size > 0
