"""The server serves the built dashboard at /ui/ and leads / there."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from backend.app import create_app
from tests.conftest import make_settings


def client_with(tmp_path: Path, ui_dir: Path) -> TestClient:
    settings = make_settings(f"sqlite:///{tmp_path / 'ui.db'}", tmp_path / "data", ui_dir=ui_dir)
    return TestClient(create_app(settings))


def test_the_built_dashboard_is_served_without_a_token(tmp_path: Path) -> None:
    built = tmp_path / "dist"
    (built / "assets").mkdir(parents=True)
    (built / "index.html").write_text("<!doctype html><title>Strata</title><div id=app></div>")
    (built / "assets" / "app.js").write_text("console.log('strata')")
    with client_with(tmp_path, built) as client:
        root = client.get("/", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "/ui/"
        page = client.get("/ui/")
        assert page.status_code == 200 and "<div id=app>" in page.text
        assert client.get("/ui/assets/app.js").text == "console.log('strata')"
        assert client.get("/ui/../config.py").status_code == 404
        assert client.get("/jobs").status_code == 401  # the API still wants its token


def test_an_unbuilt_dashboard_says_how_to_build_it(tmp_path: Path) -> None:
    with client_with(tmp_path, tmp_path / "missing") as client:
        page = client.get("/ui/")
        assert page.status_code == 503 and "make ui" in page.text
