"""The controller's loop spaces its passes: by PASS_GAP_SECONDS at least, and, when changes
wait for the lock as a pass ends, by twice the time it held the lock, so that under load
passes hold it at most half the time; with none waiting the next pass need not wait."""

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
from backend.scheduling.executors import Executors
from backend.scheduling.hub import AgentHub
from backend.scheduling.native import NativeAgents
from backend.scheduling.transaction import Transaction
from tests.conftest import Api


@pytest.mark.parametrize("held", [0.001, 0.1])
@pytest.mark.parametrize("others_waiting", [True, False])
async def test_a_pass_starts_no_sooner_than_the_gap_after_the_last(
    held: float, others_waiting: bool
) -> None:
    settings = Settings()
    tokens = TokenRegistry({TokenKind.admin: SecretStr("a" * 32), TokenKind.agent: None})
    controller = Controller(
        settings=settings,
        sessions=None,  # type: ignore[arg-type]  # never opened: the passes are stand-ins
        executors=Executors(agents=NativeAgents(settings=settings, tokens=tokens, hub=AgentHub())),
    )
    starts: list[float] = []

    async def reconcile() -> float:
        starts.append(time.monotonic())
        controller.wake()  # always more to do: the loop runs as often as it may
        await asyncio.sleep(held)
        controller._queued = int(others_waiting)  # a change waiting for the lock, or none
        return held

    controller.reconcile = reconcile  # type: ignore[method-assign]
    runner = asyncio.create_task(controller.run())
    while len(starts) < 6:
        await asyncio.sleep(0.01)
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    least = max(PASS_GAP_SECONDS, (PASS_GAP_FACTOR if others_waiting else 1) * held)
    assert min(gaps) >= least - 0.005, gaps
    if not others_waiting:  # no room left for anyone: passes follow each other closely
        assert max(gaps) < PASS_GAP_FACTOR * max(PASS_GAP_SECONDS, held), gaps


async def test_changes_waiting_for_the_lock_are_counted(api: Api) -> None:
    controller = api.app.state.controller  # type: ignore[attr-defined]
    assert isinstance(controller, Controller)
    release, holding = asyncio.Event(), asyncio.Event()

    async def hold(_tx: Transaction) -> None:
        holding.set()
        await release.wait()

    async def nothing(_tx: Transaction) -> None:
        return None

    first = asyncio.create_task(controller.apply(hold))
    await holding.wait()
    second = asyncio.create_task(controller.apply(nothing))
    await asyncio.sleep(0.05)
    assert controller._queued == 1  # the second, behind the first
    release.set()
    await asyncio.gather(first, second)
    assert controller._queued == 0
