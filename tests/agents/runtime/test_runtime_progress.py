"""What a training process reports of its progress: nothing before fit's first epoch; the
first step as tracing until the step moves; nested busy phases; not training once fit ends."""

from __future__ import annotations

from agents.runtime.progress import TrainingProgress


class Steps:
    def __init__(self) -> None:
        self.step = 0

    def __call__(self) -> int:
        return self.step


def test_the_first_step_is_tracing_until_the_step_moves() -> None:
    progress, steps = TrainingProgress(), Steps()
    assert progress.snapshot() is None
    progress.begin(steps, steps=50, epochs=4)
    assert progress.snapshot() is None  # the first epoch has not begun: the step is not known
    progress.epoch_begin(0)
    first = progress.snapshot()
    assert first is not None
    assert (first.step, first.total_steps, first.busy, first.training) == (0, 200, "tracing", True)
    steps.step = 1
    moved = progress.snapshot()
    assert moved is not None and moved.busy is None and moved.epoch == 0


def test_a_resumed_fit_traces_from_the_step_its_epoch_starts_at() -> None:
    progress, steps = TrainingProgress(), Steps()
    progress.begin(steps, steps=50, epochs=4)
    steps.step = 100  # the epoch it resumes at starts at step 100
    progress.epoch_begin(2)
    resumed = progress.snapshot()
    assert resumed is not None and (resumed.step, resumed.busy) == (100, "tracing")
    steps.step = 101
    assert progress.snapshot().busy is None  # type: ignore[union-attr]


def test_busy_phases_nest_and_the_innermost_is_reported() -> None:
    progress, steps = TrainingProgress(), Steps()
    progress.begin(steps, steps=None, epochs=1)
    progress.epoch_begin(0)
    steps.step = 3
    progress.enter("evaluating")
    with progress.busy("checkpointing"):
        assert progress.snapshot().busy == "checkpointing"  # type: ignore[union-attr]
    assert progress.snapshot().busy == "evaluating"  # type: ignore[union-attr]
    progress.leave("evaluating")
    progress.leave("evaluating")  # once too often: harmless
    report = progress.snapshot()
    assert report is not None and report.busy is None and report.total_steps is None


def test_after_fit_the_last_step_is_reported_as_not_training() -> None:
    progress, steps = TrainingProgress(), Steps()
    progress.begin(steps, steps=10, epochs=1)
    progress.epoch_begin(0)
    steps.step = 10
    progress.enter("checkpointing")
    progress.end()
    done = progress.snapshot()
    assert done is not None and (done.step, done.training, done.busy) == (10, False, None)
