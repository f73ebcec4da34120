"""The controller's loop spaces its passes: by PASS_GAP_SECONDS at least, and by twice the
time the last pass held the lock, so that under load passes hold it at most half the time."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import pytest
from pydantic import SecretStr

from backend.auth import TokenKind, TokenRegistry
from backend.config import Settings
from backend.scheduling.controller import PASS_GAP_FACTOR, PASS_GAP_SECONDS, Controller
from backend.scheduling.hub import AgentHub


@pytest.mark.parametrize("held", [0.001, 0.1])
async def test_a_pass_starts_no_sooner_than_the_gap_after_the_last(held: float) -> None:
    controller = Controller(
        settings=Settings(),
        sessions=None,  # type: ignore[arg-type]  # never opened: the passes are stand-ins
        hub=AgentHub(),
        tokens=TokenRegistry({TokenKind.admin: SecretStr("a" * 32), TokenKind.agent: None}),
    )
    starts: list[float] = []

    async def reconcile() -> float:
        starts.append(time.monotonic())
        controller.wake()  # always more to do: the loop runs as often as it may
        await asyncio.sleep(held)
        return held

    controller.reconcile = reconcile  # type: ignore[method-assign]
    runner = asyncio.create_task(controller.run())
    while len(starts) < 6:
        await asyncio.sleep(0.01)
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner
    least = max(PASS_GAP_SECONDS, PASS_GAP_FACTOR * held)
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) >= least - 0.005, gaps
