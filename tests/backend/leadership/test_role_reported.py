"""/healthz and /metrics say whether the replica leads, on both databases."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Api


async def test_healthz_names_the_replica_and_its_role(api: Api, tmp_path: Path) -> None:
    health = (await api.http.get("/healthz", headers={"Authorization": ""})).json()
    assert health["status"] == "ok"
    assert health["role"] == "leader"  # the only replica leads
    assert health["replica"] == (tmp_path / "data" / "replica-id").read_text().strip()
    if health["database"] == "postgresql":
        assert health["epoch"] >= 1
    else:
        assert health["epoch"] is None  # SQLite's one server needs no lease


async def test_metrics_say_it_leads(api: Api) -> None:
    text = (await api.http.get("/metrics")).text
    assert "strata_leader 1.0" in text
    assert "strata_leadership_changes_total 1.0" in text
