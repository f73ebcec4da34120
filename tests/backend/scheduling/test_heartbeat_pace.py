"""The heartbeat period is stretched as the fleet grows, and the connected agents told."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agents.protocol import Heartbeat, HeartbeatPeriod, RunningTask, StopTask, TaskKey, Welcome
from backend.app import create_app
from backend.scheduling.pace import STEP, HeartbeatPace
from tests.backend.api.test_agent_channel import AGENT, hello, receive
from tests.conftest import make_settings


def pace() -> HeartbeatPace:
    return HeartbeatPace(least_seconds=1.0, most_per_second=100, least_timeout_seconds=6.0)


def test_the_configured_period_holds_until_the_fleet_beats_too_often() -> None:
    paced = pace()
    assert not paced.fleet_of(100)  # 100 a second at 1 s: as many as may beat
    assert not paced.fleet_of(int(100 * STEP) - 1)  # grown by less than a step: not told
    assert (paced.seconds, paced.timeout_seconds) == (1.0, 6.0)


def test_a_larger_fleet_beats_less_often_and_may_be_silent_longer() -> None:
    paced = pace()
    assert paced.fleet_of(300)
    assert (paced.seconds, paced.timeout_seconds) == (3.0, 18.0)


def test_the_period_never_shrinks_while_the_server_runs() -> None:
    # An agent told 3 s may still beat at 3 s: its silence is judged by that period.
    paced = pace()
    paced.fleet_of(300)
    assert not paced.fleet_of(10)
    assert paced.seconds == 3.0


def test_connected_agents_are_told_when_the_period_grows(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(
        database_url, tmp_path / "data", reconcile_seconds=0.05, max_heartbeats_per_second=2.0
    )
    with TestClient(create_app(settings)) as client, contextlib.ExitStack() as stack:
        connected = []
        for name in ("host-1", "host-2", "host-3"):
            ws = stack.enter_context(client.websocket_connect("/agents/connect", headers=AGENT))
            ws.send_text(hello(name))
            connected.append((ws, receive(ws)))
        # Two agents at 1 s are two heartbeats a second: as many as may come. A third
        # stretches the period to 1.5 s: its welcome says so, and the two others are told.
        assert [welcome for _, welcome in connected] == [
            Welcome(heartbeat_seconds=1.0),
            Welcome(heartbeat_seconds=1.0),
            Welcome(heartbeat_seconds=1.5),
        ]
        # Then each says it runs a task it should not, which is answered by a stop: a frame
        # that follows the one they were told, if they were (rather than a wait forever).
        for job_id, (ws, _) in enumerate(connected[:2], start=900):
            stray = RunningTask(key=TaskKey(job_id=job_id, task="chief:0", attempt=0), pid=4242)
            ws.send_text(Heartbeat(running=[stray]).model_dump_json())
            assert receive(ws) == HeartbeatPeriod(heartbeat_seconds=1.5)
            assert isinstance(stop := receive(ws), StopTask) and stop.key == stray.key


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_a_fleet_rate_must_be_positive(rate: float, database_url: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_heartbeats_per_second"):
        make_settings(database_url, tmp_path / "data", max_heartbeats_per_second=rate)
