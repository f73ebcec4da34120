"""The replica's identity and the locks: one server per SQLite file, one per data dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.leadership.claim import claim
from backend.leadership.replica import (
    ServerRefused,
    load_or_create_replica_id,
    lock_sqlite,
    sqlite_file,
)
from tests.conftest import make_settings, serving


def test_the_replica_id_is_kept_across_restarts(tmp_path: Path) -> None:
    made = load_or_create_replica_id(tmp_path)
    assert load_or_create_replica_id(tmp_path) == made
    assert (tmp_path / "replica-id").read_text().strip() == made


def test_a_corrupt_replica_id_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "replica-id").write_text("not an id\n")
    with pytest.raises(ServerRefused, match="delete it"):
        load_or_create_replica_id(tmp_path)


def test_a_second_server_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    database = tmp_path / "strata.db"
    first = lock_sqlite(database)
    with pytest.raises(ServerRefused) as refused:
        lock_sqlite(database)
    assert str(database) in str(refused.value)
    assert "SQLite is a database for one server" in str(refused.value)
    assert "PostgreSQL" in str(refused.value)
    first.release()
    lock_sqlite(database).release()  # free again once the first let go


def test_a_second_server_on_one_data_dir_is_refused_on_postgresql(tmp_path: Path) -> None:
    url = "postgresql+asyncpg://strata@db/strata"
    first = claim(tmp_path, url)
    with pytest.raises(ServerRefused, match="a data dir of its own"):
        claim(tmp_path, url)
    first.release_locks()
    claim(tmp_path, url).release_locks()


def test_sqlite_urls_name_their_file(tmp_path: Path) -> None:
    assert sqlite_file(f"sqlite+aiosqlite:///{tmp_path}/s.db") == tmp_path / "s.db"
    assert sqlite_file("sqlite+aiosqlite:///:memory:") is None
    assert sqlite_file("postgresql+asyncpg://u@h/d") is None


async def test_a_second_app_on_one_sqlite_file_does_not_start(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'strata.db'}"
    async with serving(make_settings(database, tmp_path / "one")) as first:
        health = (await first.http.get("/healthz")).json()
        assert health["role"] == "leader" and health["epoch"] is None
        with pytest.raises(ServerRefused, match="SQLite is a database for one server"):
            async with serving(make_settings(database, tmp_path / "two")):
                pass
    async with serving(make_settings(database, tmp_path / "two")):
        pass  # the first released the file as it stopped
