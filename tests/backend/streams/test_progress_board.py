"""The progress board: the latest report per task attempt, the job's lead, the step rate and
time left, and how long a job's watched tasks have been quiet."""

from __future__ import annotations

from datetime import UTC, datetime

from agents.protocol import Progress
from backend.streams.progress import ProgressBoard


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def board_and_clock() -> tuple[ProgressBoard, Clock]:
    clock = Clock()
    return ProgressBoard(clock=clock, wall=lambda: datetime.fromtimestamp(clock.now, UTC)), clock


def report(step: int, **fields: object) -> Progress:
    return Progress.model_validate({"step": step, "total_steps": 1000, "epoch": 0, **fields})


def test_progress_gives_the_rate_and_the_time_left() -> None:
    board, clock = board_and_clock()
    board.note(1, "chief:0", 0, report(0, busy="tracing"))
    clock.now += 40  # tracing: not in the rate
    board.note(1, "chief:0", 0, report(10))
    for _ in range(10):
        clock.now += 1
        board.note(1, "chief:0", 0, report(board.read(1).step + 20))  # type: ignore[union-attr]
    progress = board.read(1)
    assert progress is not None
    assert progress.step == 210
    assert progress.steps_per_second == 20.0
    assert progress.eta_seconds == (1000 - 210) / 20.0
    assert progress.epoch == 1  # reported 0-based, read 1-based
    assert progress.updated_at == datetime.fromtimestamp(clock.now, UTC)


def test_a_stalled_job_s_rate_falls_to_zero() -> None:
    board, clock = board_and_clock()
    for step in range(0, 100, 10):
        board.note(1, "chief:0", 0, report(step + 10))
        clock.now += 1
    assert board.read(1).steps_per_second == 10.0  # type: ignore[union-attr]
    clock.now += 120
    assert board.read(1).steps_per_second == 0.0  # type: ignore[union-attr]
    assert board.read(1).eta_seconds is None  # type: ignore[union-attr]


def test_quiet_counts_from_the_last_step_or_phase_change() -> None:
    board, clock = board_and_clock()
    board.note(1, "worker:0", 0, report(5))
    clock.now += 1
    board.note(1, "worker:0", 0, report(6))
    clock.now += 30
    quiet = board.quiet(1, {"worker:0": 0})
    assert quiet is not None and quiet.seconds == 30 and quiet.step == 6 and quiet.busy is None
    assert quiet.median_step_seconds == 1.0
    assert board.quiet(1, {"worker:0": 0}, at_least=31) is None

    board.note(1, "worker:0", 0, report(6, busy="checkpointing"))  # a phase began: no hang
    clock.now += 5
    quiet = board.quiet(1, {"worker:0": 0})
    assert quiet is not None and quiet.seconds == 5 and quiet.busy == "checkpointing"


def test_a_finished_fit_and_a_replaced_attempt_are_not_watched() -> None:
    board, clock = board_and_clock()
    board.note(1, "worker:0", 0, report(5))
    board.note(1, "worker:1", 0, report(5))
    clock.now += 100
    board.note(1, "worker:0", 0, report(5, training=False))
    quiet = board.quiet(1, {"worker:0": 0, "worker:1": 0})
    assert quiet is not None and quiet.tasks == ("worker:1",)
    # worker:1 restarted: its attempt 0's report is dropped, nothing is left to watch.
    assert board.quiet(1, {"worker:0": 0, "worker:1": 1}) is None
    # A client coordinator reports as chief:0 of no task: shown, never watched.
    board.note(2, "chief:0", 3, report(5))
    clock.now += 100
    assert board.quiet(2, {"worker:0": 0}) is None
    assert board.read(2) is not None


def test_a_newer_attempt_replaces_the_report_and_an_older_one_is_ignored() -> None:
    board, _ = board_and_clock()
    board.note(1, "chief:0", 1, report(50))
    board.note(1, "chief:0", 0, report(900))  # a late frame of the stopped attempt
    assert board.read(1).step == 50  # type: ignore[union-attr]
    board.note(1, "chief:0", 2, report(40))
    assert board.read(1).step == 40  # type: ignore[union-attr]
    board.forget(1)
    assert board.read(1) is None and board.job_ids() == set()
