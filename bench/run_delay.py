"""Time a process's threads spent runnable but waiting for a CPU (the scheduler's run delay).

Two ways of starting the same job can cost the same CPU per second yet train at different
speeds when one of them waits longer for a CPU at the moments that matter (a kernel scheduling
group per session, wake-ups of other processes). The kernel counts that wait per thread in
/proc/<pid>/task/<tid>/schedstat (its second field, in nanoseconds); summed over the threads
alive at each sample it is a counter bench/cpu_sampler.CpuSampler can sample (`read`). Threads
that ended take their wait with them, so the sampler keeps the highest value seen.
"""

from __future__ import annotations

import contextlib
from pathlib import Path


def run_delay_seconds(pid: int) -> float:
    """The run-queue wait of a process's live threads so far, in seconds (0 if it is gone or
    the kernel keeps no schedstats)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9
