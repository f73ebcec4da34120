"""When StrataBackup records the batch for TensorFlow's save before preemption
(agents.runtime.backup.preemption_under_way); the save itself runs in the MWM suspend e2e."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from agents.runtime.backup import preemption_under_way


def handler(own: bool = False, peer: bool = False, countdown: bool = False) -> SimpleNamespace:
    own_sigterm, checkpoint_step = threading.Event(), threading.Event()
    if own:
        own_sigterm.set()
    if peer:
        checkpoint_step.set()
    return SimpleNamespace(
        _received_own_sigterm=own_sigterm,
        _received_checkpoint_step=checkpoint_step,
        _final_checkpoint_countdown=countdown,
    )


def test_a_quiet_handler_needs_no_batch() -> None:
    assert not preemption_under_way(SimpleNamespace(_preemption_handler=handler()))


@pytest.mark.parametrize(
    "flags",
    [{"own": True}, {"peer": True}, {"countdown": True}],
    ids=["own SIGTERM", "a peer's step to save at", "the grace period after a save"],
)
def test_any_preemption_under_way_records_the_batch(flags: dict[str, bool]) -> None:
    assert preemption_under_way(SimpleNamespace(_preemption_handler=handler(**flags)))


def test_a_handler_it_cannot_read_always_records_the_batch() -> None:
    assert preemption_under_way(SimpleNamespace(_preemption_handler=None))
    assert preemption_under_way(SimpleNamespace())
