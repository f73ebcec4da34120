"""`strata up`'s options: a flag given wins, then the environment, then the built-in default."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from backend.cli.server import up_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "STRATA_PORT",
        "STRATA_DATA_DIR",
        "STRATA_API_TOKEN",
        "STRATA_AGENT_TOKEN",
        "STRATA_TLS_CERTFILE",
        "STRATA_TLS_KEYFILE",
    ):
        monkeypatch.delenv(name, raising=False)


def test_the_environment_wins_over_the_built_in_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_PORT", "9123")
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path / "from-env"))
    settings = up_settings(port=None, db=None, data_dir=None)
    assert settings.port == 9123
    assert settings.data_dir == tmp_path / "from-env"
    # The tokens it makes on its first run are kept in that data dir.
    assert (tmp_path / "from-env" / "tokens.json").is_file()
    assert settings.api_token is not None and settings.agent_token is not None


def test_a_flag_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_PORT", "9123")
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path / "from-env"))
    settings = up_settings(port=9200, db=None, data_dir=tmp_path / "from-flag")
    assert settings.port == 9200
    assert settings.data_dir == tmp_path / "from-flag"
    assert (tmp_path / "from-flag" / "tokens.json").is_file()
    assert not (tmp_path / "from-env").exists()


def test_without_either_the_port_is_8000(tmp_path: Path) -> None:
    assert up_settings(port=None, db=None, data_dir=tmp_path).port == 8000


def test_tokens_in_the_environment_win_over_the_kept_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = up_settings(port=None, db=None, data_dir=tmp_path)
    monkeypatch.setenv("STRATA_API_TOKEN", "admin-from-env-0123456789")
    again = up_settings(port=None, db=None, data_dir=tmp_path)
    assert again.api_token is not None and kept.agent_token is not None
    assert again.api_token.get_secret_value() == "admin-from-env-0123456789"
    assert again.agent_token == kept.agent_token  # the kept one, as before


def test_tls_settings_are_refused_with_what_to_do_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("cert.pem", "key.pem"):
        (tmp_path / name).write_text("not read: refused before\n")
    monkeypatch.setenv("STRATA_TLS_CERTFILE", str(tmp_path / "cert.pem"))
    monkeypatch.setenv("STRATA_TLS_KEYFILE", str(tmp_path / "key.pem"))
    with pytest.raises(typer.Exit) as refused:
        up_settings(port=None, db=None, data_dir=tmp_path / "data")
    assert refused.value.exit_code == 2
    said = " ".join(capsys.readouterr().out.split())
    assert "`strata up` serves plain HTTP" in said
    assert "run `strata server` with them" in said
    assert not (tmp_path / "data").exists()  # nothing made: no tokens
