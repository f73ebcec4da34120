"""Where Optuna's tables go, for Strata's database URL."""

from __future__ import annotations

from backend.sweeps.study import storage_url


def test_sqlite_gets_a_file_beside_strata_db() -> None:
    url, kwargs = storage_url("sqlite+aiosqlite:////var/lib/strata/strata.db")
    assert url == "sqlite:////var/lib/strata/optuna.db"
    assert kwargs == {"connect_args": {"timeout": 30}}


def test_postgresql_gets_a_schema_of_the_same_database_through_psycopg() -> None:
    url, kwargs = storage_url("postgresql+asyncpg://strata:secret@db:5432/strata?ssl=require")
    assert url == "postgresql+psycopg://strata:secret@db:5432/strata?sslmode=require"
    assert kwargs["connect_args"] == {"options": "-c search_path=optuna"}
    url, _ = storage_url("postgresql+asyncpg://strata@db/strata")
    assert url == "postgresql+psycopg://strata@db/strata"
