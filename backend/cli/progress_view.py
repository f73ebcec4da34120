"""A running job's progress in words: the `jobs ls` cell, the `jobs show` line and the bar that
`--follow` draws. Pure functions of `JobProgress`, so every wording is tested without a job."""

from __future__ import annotations

import math

from backend.jobs.schemas import JobProgress

NONE = "-"  # what the other CLI tables print for an empty cell
BAR_WIDTH = 24
# Below this many steps a second a rate reads better as seconds per step ("20s/step").
SLOW_RATE = 0.1


def readable_duration(seconds: float) -> str:
    """'45s', '3m22s', '2h05m', '3d04h': the two largest units, the smaller zero-padded."""
    whole = max(0, round(seconds)) if math.isfinite(seconds) else 0
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def readable_rate(steps_per_second: float, unit: str = "/s") -> str:
    """'1234/s', '12.3/s', '2.46/s'; a slow job's as '20s/step'. `unit` is what follows the
    number of steps a second (' steps/s' where there is room)."""
    if steps_per_second <= 0:
        return "stalled"
    if steps_per_second < SLOW_RATE:
        return f"{readable_duration(1 / steps_per_second)}/step"
    if steps_per_second >= 100:
        return f"{steps_per_second:.0f}{unit}"
    if steps_per_second >= 10:
        return f"{steps_per_second:.1f}{unit}"
    return f"{steps_per_second:.2f}{unit}"


def percent(step: int, total: int) -> int:
    """Whole percent done, rounded down (100 only once the last step is done) and within
    0..100: a run resumed under another total may have passed it."""
    if total <= 0:
        return 0
    return max(0, min(100, step * 100 // total))


def _rate_and_eta(progress: JobProgress, unit: str) -> list[str]:
    parts = []
    if progress.steps_per_second is not None:
        parts.append(readable_rate(progress.steps_per_second, unit))
    if progress.eta_seconds is not None and progress.total_steps is not None:
        parts.append(f"ETA {readable_duration(progress.eta_seconds)}")
    return parts


def progress_cell(progress: JobProgress | None) -> str:
    """The `jobs ls` column: '1520/4000 38% 12.3/s ETA 3m22s', 'step 1520 12.3/s' while the
    total is unknown, '-' when there is nothing to show."""
    if progress is None:
        return NONE
    if progress.total_steps is None:
        head = f"step {progress.step}"
    else:
        head = (
            f"{progress.step}/{progress.total_steps} "
            f"{percent(progress.step, progress.total_steps)}%"
        )
    return " ".join([head, *_rate_and_eta(progress, "/s")])


def progress_line(progress: JobProgress) -> str:
    """The `jobs show` line: 'step 1520 of 4000 (38%), epoch 2 of 5, 12.3 steps/s, ETA 3m22s,
    checkpointing'."""
    if progress.total_steps is None:
        parts = [f"step {progress.step}"]
    else:
        done = percent(progress.step, progress.total_steps)
        parts = [f"step {progress.step} of {progress.total_steps} ({done}%)"]
    if progress.epoch is not None:
        parts.append(
            f"epoch {progress.epoch}"
            + (f" of {progress.epochs}" if progress.epochs is not None else "")
        )
    parts.extend(_rate_and_eta(progress, " steps/s"))
    if progress.busy:
        parts.append(progress.busy)
    return ", ".join(parts)


def bar(step: int, total: int, width: int = BAR_WIDTH) -> str:
    """'██████░░░░░░' for the share of steps done, `width` characters."""
    filled = width * percent(step, total) // 100
    return "█" * filled + "░" * (width - filled)


def progress_summary(progress: JobProgress) -> str:
    """What follows the bar while following a job: '1520/4000 38% · epoch 2/5 · 12.3/s ·
    ETA 3m22s · checkpointing'."""
    if progress.total_steps is None:
        parts = [f"step {progress.step}"]
    else:
        parts = [
            f"{progress.step}/{progress.total_steps} "
            f"{percent(progress.step, progress.total_steps)}%"
        ]
    if progress.epoch is not None:
        parts.append(
            f"epoch {progress.epoch}"
            + (f"/{progress.epochs}" if progress.epochs is not None else "")
        )
    parts.extend(_rate_and_eta(progress, "/s"))
    if progress.busy:
        parts.append(progress.busy)
    return " · ".join(parts)
