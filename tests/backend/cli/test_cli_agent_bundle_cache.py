"""`strata agent --bundle-cache-bytes` (or STRATA_AGENT_BUNDLE_CACHE_BYTES): the bound of the
agent's code bundle cache, as a size people write."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agents.host import agent as host_agent
from agents.host.agent import AgentConfig
from agents.host.bundles import DEFAULT_CACHE_BYTES
from backend.cli import agent as agent_cli
from backend.cli import app


class Started(Exception):
    """Raised in place of starting an agent, carrying the config it would have run with."""

    def __init__(self, config: AgentConfig) -> None:
        super().__init__("agent started")
        self.config = config


class FakeAgent:
    def __init__(self, config: AgentConfig) -> None:
        raise Started(config)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2GiB", 2 << 30), ("500MB", 500_000_000), ("1048576", 1 << 20), ("1.5G", 3 << 29)],
)
def test_sizes_are_read_as_people_write_them(text: str, expected: int) -> None:
    assert agent_cli.parse_bundle_cache_bytes(text) == expected


@pytest.mark.parametrize(("text", "says"), [("lots", "not a memory size"), ("0", "above 0")])
def test_a_size_that_is_not_one_names_the_flag(text: str, says: str) -> None:
    with pytest.raises(typer.BadParameter, match=says) as raised:
        agent_cli.parse_bundle_cache_bytes(text)
    assert raised.value.param_hint == "--bundle-cache-bytes"


def run_agent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, AgentConfig | None]:
    # Where the command imports it from when it runs (not at the top of backend.cli.agent).
    monkeypatch.setattr(host_agent, "Agent", FakeAgent)
    result = CliRunner().invoke(
        app,
        [
            "agent",
            "--server",
            "http://127.0.0.1:1",
            "--token",
            "t",
            "--workspace",
            str(tmp_path),
            *args,
        ],
        env=env,
    )
    started = result.exception if isinstance(result.exception, Started) else None
    return result.exit_code, result.output, None if started is None else started.config


def test_the_flag_and_its_env_reach_the_agent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("STRATA_AGENT_BUNDLE_CACHE_BYTES", raising=False)
    _, _, default = run_agent(monkeypatch, tmp_path)
    assert default is not None and default.bundle_cache_bytes == DEFAULT_CACHE_BYTES
    _, _, flagged = run_agent(monkeypatch, tmp_path, "--bundle-cache-bytes", "2GiB")
    assert flagged is not None and flagged.bundle_cache_bytes == 2 << 30
    _, _, from_env = run_agent(
        monkeypatch, tmp_path, env={"STRATA_AGENT_BUNDLE_CACHE_BYTES": "512MiB"}
    )
    assert from_env is not None and from_env.bundle_cache_bytes == 512 << 20


def test_a_bad_size_stops_the_agent_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, output, config = run_agent(monkeypatch, tmp_path, "--bundle-cache-bytes", "2 parsecs")
    assert code == 2 and config is None
    assert "--bundle-cache-bytes" in output and "not a memory size" in output
