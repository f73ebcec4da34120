"""Background loops end when cancelled, even when the cancellation lands just as what they
wait for happens. On Python 3.11 `asyncio.wait_for` returns the result in that case and
the cancellation is lost: the loop runs on and the server's shutdown, awaiting it, hangs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from backend.auth import TokenKind, TokenRegistry
from backend.cluster.board import ClusterBoard
from backend.config import Settings
from backend.scheduling.controller import Controller
from backend.scheduling.executors import Executors
from backend.scheduling.hub import AgentHub
from backend.scheduling.native import NativeAgents
from backend.slurm.reconcile import SlurmSync
from backend.tensorboard.processes import TensorBoards
from tests.conftest import make_settings, serving

ROOT = Path(__file__).resolve().parents[2]
TOKENS = TokenRegistry({TokenKind.admin: SecretStr("a" * 32), TokenKind.agent: None})


async def ends_when_cancelled_as_woken(
    run: Callable[[], Coroutine[Any, Any, None]], wake: Callable[[], None], passes: list[int]
) -> bool:
    """Whether `run` ends within a second of a cancellation that follows a wake-up by one
    turn of the event loop (the inner wait done, the loop not yet resumed)."""
    runner = asyncio.create_task(run())
    while not passes:  # the first pass, so that the loop waits for the next wake-up
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    wake()
    await asyncio.sleep(0)
    runner.cancel()
    done, _ = await asyncio.wait({runner}, timeout=1.0)
    if not done:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    return bool(done) and runner.cancelled()


async def test_the_controller_loop_ends_when_cancelled_just_after_a_wake_up() -> None:
    settings = Settings(reconcile_seconds=0.2)
    controller = Controller(
        settings=settings,
        sessions=None,  # type: ignore[arg-type]  # never opened: the passes are stand-ins
        executors=Executors(agents=NativeAgents(settings=settings, tokens=TOKENS, hub=AgentHub())),
    )
    passes: list[int] = []

    async def reconcile() -> float:
        passes.append(1)
        return 0.0

    controller.reconcile = reconcile  # type: ignore[method-assign]
    assert await ends_when_cancelled_as_woken(controller.run, controller.wake, passes)


async def test_the_slurm_loop_ends_when_cancelled_just_after_a_wake_up() -> None:
    async def apply(_change: object, **_: object) -> None:
        return None

    slurm = SlurmSync(
        settings=Settings(slurm_poll_seconds=0.2),
        sessions=None,  # type: ignore[arg-type]  # never opened: the passes are stand-ins
        tokens=TOKENS,
        apply=apply,
    )
    passes: list[int] = []

    async def reconcile_once() -> None:
        passes.append(1)

    slurm.reconcile_once = reconcile_once  # type: ignore[method-assign]
    assert await ends_when_cancelled_as_woken(slurm.run, slurm.wake, passes)


def test_no_module_waits_with_asyncio_wait_for() -> None:
    """`asyncio.timeout` keeps the cancellation that `wait_for` can lose (see above)."""
    uses = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("backend", "agents")
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\bwait_for\(", line)
    ]
    assert uses == [], f"use `async with asyncio.timeout(...)` instead: {uses}"


async def test_the_app_shuts_down_past_a_service_that_does_not_end_when_cancelled(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A loop service that never ends once cancelled is logged by name and left behind; one
    that swallowed one cancellation (as `wait_for` could) ends on the next one."""
    released = asyncio.Event()
    started = {"board": asyncio.Event(), "tensorboards": asyncio.Event()}

    async def deaf(_self: object, *_: object, **__: object) -> None:
        started["board"].set()
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # every cancellation swallowed
                await released.wait()

    async def deaf_once(_self: object, *_: object, **__: object) -> None:
        started["tensorboards"].set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        await asyncio.Event().wait()

    monkeypatch.setattr(ClusterBoard, "run", deaf)
    monkeypatch.setattr(TensorBoards, "run", deaf_once)
    caplog.set_level(logging.INFO, logger="backend.shutdown")
    settings = make_settings(database_url, tmp_path / "data", shutdown_seconds=1.0)
    async with asyncio.timeout(30):  # shutdown's own bound is 1 s a step: ample
        async with serving(settings):
            for event in started.values():
                await event.wait()
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "backend.shutdown"]
    assert logged == [
        ("ERROR", "shutting down without board: still running 1.0 s after cancellation")
    ]
    board = next(task for task in asyncio.all_tasks() if task.get_name() == "board")
    released.set()  # the stuck service, left behind, is let go so the test ends clean
    await board
