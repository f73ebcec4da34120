"""Fixtures shared by the backend tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from tests.conftest import make_settings


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[TestClient]:
    """The app in a TestClient, lifespan running, on both databases."""
    with TestClient(create_app(make_settings(database_url, tmp_path / "data"))) as test_client:
        yield test_client
