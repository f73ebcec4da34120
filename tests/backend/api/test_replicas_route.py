"""`GET /replicas`: the one server on SQLite; on PostgreSQL every replica of one database, as
each of them answers it (from the database, never forwarded)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from backend.app import create_app
from tests.backend.api.test_forwarding import served
from tests.conftest import ADMIN_TOKEN, Api, make_settings, serving
from tests.support.factories import make_spec
from tests.support.postgres import free_port

LEASE_SECONDS = 2.0


def replica_of(api: Api) -> str:
    app: Any = api.app
    replica: str = app.state.lease.replica
    return replica


async def test_replicas_needs_a_token(api: Api) -> None:
    assert (await api.http.get("/replicas", headers={"Authorization": ""})).status_code == 401
    wrong = {"Authorization": "Bearer not-a-token"}
    assert (await api.http.get("/replicas", headers=wrong)).status_code == 401


async def test_the_one_server_is_listed_as_the_leader(api: Api) -> None:
    app: Any = api.app
    answer = await api.http.get("/replicas")
    assert answer.status_code == 200
    found = answer.json()
    replica = replica_of(api)
    assert found["leader"] == replica
    assert [(r["replica"], r["url"], r["role"]) for r in found["replicas"]] == [
        (replica, app.state.settings.replica_url, "leader")
    ]
    listed = found["replicas"][0]
    if app.state.engine.dialect.name == "sqlite":
        assert found["epoch"] is None and found["lease_expires_at"] is None  # no lease at all
        assert listed["started_at"] == listed["renewed_at"]
    else:
        assert found["epoch"] >= 1
        expires = datetime.fromisoformat(found["lease_expires_at"])
        assert expires > datetime.now(UTC)
        assert datetime.fromisoformat(listed["renewed_at"]) >= datetime.fromisoformat(
            listed["started_at"]
        )


async def test_the_sqlite_server_is_listed_without_a_lease(
    tmp_path: Path, migrated_sqlite: Path
) -> None:
    database = tmp_path / "strata.db"
    shutil.copyfile(migrated_sqlite, database)
    settings = make_settings(
        f"sqlite:///{database}", tmp_path / "data", advertise_url="http://sole.test:8000"
    )
    async with serving(settings) as api:
        found = (await api.http.get("/replicas")).json()
    replica = replica_of(api)
    assert (found["leader"], found["epoch"], found["lease_expires_at"]) == (replica, None, None)
    assert [(r["replica"], r["url"], r["role"]) for r in found["replicas"]] == [
        (replica, "http://sole.test:8000", "leader")
    ]


@contextlib.contextmanager
def leading_app(postgres_url: str, data_dir: Path) -> Iterator[tuple[str, FastAPI]]:
    """A server replica under uvicorn on a loopback port, advertising that port: it takes the
    lease as it starts, before any other replica on this database."""
    port = free_port()
    settings = make_settings(
        postgres_url,
        data_dir,
        advertise_url=f"http://127.0.0.1:{port}",
        leader_lease_seconds=LEASE_SECONDS,
    )
    app = create_app(settings)
    with served(app, port) as url:
        yield url, app


@pytest.mark.postgres
async def test_two_replicas_list_each_other_and_the_follower_forwards(
    postgres_url: str, tmp_path: Path
) -> None:
    follower_settings = make_settings(
        postgres_url,
        tmp_path / "b",
        advertise_url="http://replica-b.test:8000",
        leader_lease_seconds=LEASE_SECONDS,
    )
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    forwarded = {"x-strata-forwarded-by": "0123456789abcdef"}
    with leading_app(postgres_url, tmp_path / "a") as (leader_url, leader_app):
        leader = leader_app.state.lease.replica
        async with httpx.AsyncClient(
            base_url=leader_url, headers=headers, timeout=15, trust_env=False
        ) as on_leader:
            async with serving(follower_settings) as follower:
                # The follower's own /healthz (local): it follows.
                assert (await follower.http.get("/healthz")).json()["role"] == "follower"
                second = replica_of(follower)
                answers = [
                    (await client.get("/replicas")).json() for client in (on_leader, follower.http)
                ]
                for found in answers:
                    assert found["leader"] == leader and found["epoch"] >= 1
                    assert [(r["replica"], r["url"], r["role"]) for r in found["replicas"]] == [
                        (leader, leader_url, "leader"),  # oldest first
                        (second, "http://replica-b.test:8000", "follower"),
                    ]
                # Answered by the follower itself: a forwarded /replicas would be refused here.
                again = await follower.http.get("/replicas", headers=forwarded)
                assert again.status_code == 200
                no_token = await follower.http.get("/replicas", headers={"Authorization": ""})
                assert no_token.status_code == 401

                # What is not local goes to the leader, which applies it.
                created = await follower.http.post("/jobs", json=make_spec())
                assert created.status_code == 201, created.text
                assert (await on_leader.get(f"/jobs/{created.json()['id']}")).status_code == 200
                refused = await follower.http.get("/jobs", headers=forwarded)
                assert refused.status_code == 503  # the follower does not forward it again

            # The follower stopped: it is no longer listed.
            found = (await on_leader.get("/replicas")).json()
            assert [r["replica"] for r in found["replicas"]] == [leader]

    # The leader stopped (released): a third replica finds nobody but itself, and leads.
    third_settings = make_settings(
        postgres_url, tmp_path / "c", advertise_url="http://replica-c.test:8000"
    )
    async with serving(third_settings) as third:
        found = (await third.http.get("/replicas")).json()
        assert found["leader"] == replica_of(third) != leader
        assert [(r["url"], r["role"]) for r in found["replicas"]] == [
            ("http://replica-c.test:8000", "leader")
        ]
