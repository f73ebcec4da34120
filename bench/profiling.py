"""Sampling the server with py-spy while a benchmark loads it, and reading the samples.

py-spy is optional: without it (or where ptrace is not allowed) a benchmark runs unprofiled.
"""

from __future__ import annotations

import inspect
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


def find_pyspy() -> Path | None:
    """$PYSPY, else the one the bench extra installs beside this interpreter, else $PATH's."""
    configured = os.environ.get("PYSPY")
    if configured:
        return Path(configured)
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return beside
    found = shutil.which("py-spy")
    return Path(found) if found else None


def start(pid: int, seconds: float, out: Path, rate: int = 200) -> subprocess.Popen[bytes] | None:
    """Starts recording `pid` for `seconds` at `rate` samples/s into a collapsed-stack file;
    None without py-spy."""
    pyspy = find_pyspy()
    if pyspy is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    # --nonblocking: sampling must not pause the server it measures.
    return subprocess.Popen(
        [
            *(str(pyspy), "record", "-p", str(pid), "-d", str(max(1, round(seconds)))),
            *("-f", "raw", "-o", str(out), "--nonblocking", "-r", str(rate)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(recorder: subprocess.Popen[bytes] | None) -> None:
    """Ends a recording early; py-spy writes what it has sampled so far on SIGINT."""
    if recorder is None:
        return
    if recorder.poll() is None:
        recorder.send_signal(signal.SIGINT)
    finish(recorder)


def finish(recorder: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
    if recorder is None:
        return
    try:
        recorder.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        recorder.kill()
        recorder.wait()


def _frame_label(frame: str, *, line: bool = False) -> str:
    """`send (websockets/protocol.py:123)` → `send (websockets/protocol.py)`: lines merged
    (kept with `line`)."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")") if line else where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "python3.11/", "/work/main/"):
        if marker in file:
            file = file.split(marker, 1)[1]
    return f"{name} ({file})" if file else name


# Leaves where a thread waits rather than works (the event loop's epoll, an idle worker).
IDLE_LEAVES = ("select (selectors.py)", "wait (threading.py)", "get (queue.py)")
# The leaf of a thread inside uvloop's C loop: waiting for events or running the loop's own
# work, which py-spy (without --native) cannot tell apart. Counted apart from busy and idle.
LOOP_LEAVES = ("Runner.run (asyncio/runners.py)",)


def _idle_lines() -> tuple[str, ...]:
    """Raw leaves (with their line) where a thread waits in a call py-spy cannot see into:
    aiosqlite's worker blocked on its queue, which a C queue's get leaves as the worker's own
    frame (read as SQLite working, it was most of the thread's samples)."""
    try:
        import aiosqlite.core as worker
    except ImportError:
        return ()
    lines, first = inspect.getsourcelines(worker._connection_worker_thread)
    return tuple(
        f"_connection_worker_thread (aiosqlite/core.py:{first + n})"
        for n, line in enumerate(lines)
        if "tx.get()" in line
    )


IDLE_LINES = _idle_lines()

# What the server does with metrics, by the functions that do it; reported inclusively.
SERVER_STAGES = {
    "validate frames (pydantic)": "TypeAdapter.validate_json",
    "ingest writer (Ingestor._write)": "Ingestor._write",
    "SQLite thread (aiosqlite)": "_connection_worker_thread",
    "PostgreSQL driver (asyncpg)": "(asyncpg/",
    "build metrics frames": "metrics_frame",
    "stream send (json + cursor + ws)": "_send (backend/api/streams.py)",
    "permessage-deflate compress": "PerMessageDeflate.encode",
    "permessage-deflate decompress": "PerMessageDeflate.decode",
}

# What a training chief does besides training, under ParameterServerStrategy.
CHIEF_STAGES = {
    "RemoteValue fetch after each step (worker threads)": "RemoteValueImpl.get",
    "Keras batch hooks": "CallbackList._call_batch_hook",
    "Strata callback": "agents/runtime/callbacks.py",
    "Strata metric sender": "agents/runtime/sender.py",
    "Strata coordinator health": "agents/runtime/coordinator.py",
}


# What a training task does besides training, under either strategy.
TASK_STAGES = {
    **CHIEF_STAGES,
    "Strata backups (BackupAndRestore)": "agents/runtime/checkpoints.py",
    "tf_keras fit loop": "fit (tf_keras/src/engine/training.py)",
    "TensorFlow executing the step": "_call (tensorflow/python/eager/polymorphic_function",
}


# Samples taken while a module was being imported: a task's start-up, not its training.
IMPORTING = ("_find_and_load (<frozen importlib._bootstrap>)",)


def summarize(
    path: Path,
    stages: dict[str, str] | None = None,
    top: int = 10,
    exclude: tuple[str, ...] = (),
) -> dict[str, object]:
    """Where the busy samples went: top self-time functions and per-stage shares. Samples
    whose stack passes through any of `exclude` are left out (counted as `excluded`)."""
    stages = SERVER_STAGES if stages is None else stages
    own: Counter[str] = Counter()
    in_stage: Counter[str] = Counter()
    busy = idle = excluded = in_loop = 0
    if not path.exists():
        return {"samples": 0}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        raw = stack.split(";")
        frames = [_frame_label(f) for f in raw]
        if exclude and any(marker in frame for frame in frames for marker in exclude):
            excluded += count
            continue
        if frames[-1].endswith(IDLE_LEAVES) or _frame_label(raw[-1], line=True) in IDLE_LINES:
            idle += count
            continue
        if frames[-1].endswith(LOOP_LEAVES):
            in_loop += count
            continue
        busy += count
        own[frames[-1]] += count
        for stage, marker in stages.items():
            if any(marker in frame for frame in frames):
                in_stage[stage] += count

    def pct(n: int) -> float:
        return round(100 * n / busy, 1) if busy else 0.0

    return {
        "busy_samples": busy,
        "idle_samples": idle,
        **({"event_loop_samples": in_loop} if in_loop else {}),
        **({"excluded_samples": excluded} if exclude else {}),
        "stages_pct": {stage: pct(in_stage[stage]) for stage in stages if in_stage[stage]},
        "self_pct": [(label, pct(n)) for label, n in own.most_common(top)],
    }
