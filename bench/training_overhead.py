"""Training steps/s with Strata's metric streaming on vs off, on the digits PS example.

    .venv/bin/python -m bench.training_overhead [--quick]

The job runs by hand, as examples/README.md describes (1 chief, 2 workers, 1 ps on
localhost), in two variants that alternate A, B, A, B, ...:

* A, streaming: the chief gets STRATA_SERVER, STRATA_TASK, STRATA_ATTEMPT, STRATA_TASK_TOKEN
  and STRATA_JOB_ID for a job on a real `strata server`, so `runtime.callbacks()` returns the
  streaming callback and its points reach the server (checked: stored rows > 0), and
  STRATA_TENSORBOARD_DIR, so they are written as TensorBoard event files too;
* B, plain: none of those variables, so `runtime.callbacks()` returns [] (checked).

Steps/s is taken from the chief's own epoch lines, timestamped as they arrive: from the end of
the first epoch to the end of the last, so process start, cluster connection and the first
epoch's tracing are left out. Results go to bench/results/training_overhead.json and
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from agents.environment import TaskEnvironment
from agents.runtime.event_files import DIR_ENV as EVENT_FILES_ENV
from agents.vocabulary import Role, Strategy, TaskName
from bench import profiling, report
from bench.harness import (
    REPO,
    RESULTS,
    Conditions,
    Server,
    cpu_seconds,
    machine_busy_seconds,
    machine_info,
    spread,
    strata_server,
    undisturbed,
    write_result,
)
from tests.support.postgres import free_port

PYTHON = sys.executable
TARGET = 0.98  # streaming keeps at least 98% of plain steps/s
PROFILE_SECONDS = 5.0  # sampled from the first epoch line: within the timed window
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=")
JOB_SPEC: dict[str, Any] = {
    "name": "digits-bench",
    "strategy": "parameter_server",
    "entrypoint": ["python", "examples/digits.py"],
    "replicas": {"chief": {"count": 1}, "worker": {"count": 2}, "ps": {"count": 1}},
}
CHECK_CALLBACKS = (
    "import sys; from agents import runtime; cbs = runtime.callbacks(); "
    "print([type(c).__name__ for c in cbs]); sys.exit(0 if cbs == [] else 1)"
)


@dataclass(frozen=True)
class Plan:
    pairs: int
    epochs: int
    steps_per_epoch: int
    batch: int
    workers: int
    extra_pairs: int  # run to make up for pairs disturbed by other load


FULL = Plan(pairs=8, epochs=60, steps_per_epoch=20, batch=64, workers=2, extra_pairs=2)
QUICK = Plan(pairs=2, epochs=30, steps_per_epoch=20, batch=64, workers=2, extra_pairs=0)


# --- one run of the job ------------------------------------------------------------------------


def _cluster(workers: int) -> dict[str, list[str]]:
    return {
        "chief": [f"127.0.0.1:{free_port()}"],
        "worker": [f"127.0.0.1:{free_port()}" for _ in range(workers)],
        "ps": [f"127.0.0.1:{free_port()}"],
    }


def _task_env(
    base: dict[str, str], cluster: dict[str, list[str]], role: str, index: int
) -> dict[str, str]:
    config = {"cluster": cluster, "task": {"type": role, "index": index}}
    return {**base, **TaskEnvironment(tf_config=json.dumps(config)).to_env()}


def plain_env() -> dict[str, str]:
    """The README's recipe, with every STRATA_* variable of ours removed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    recipe = TaskEnvironment(
        strategy=Strategy.parameter_server, legacy_keras="1", grpc_fail_fast="use_caller"
    )
    return env | recipe.to_env() | {"PYTHONUNBUFFERED": "1"}


def _terminate(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (the servers exit 0 on it), then SIGKILL whatever lingers."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def task_servers(
    cluster: dict[str, list[str]], env: dict[str, str], logs: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The workers and the ps: `python -m agents.runtime.server`, until SIGTERM."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for role in ("worker", "ps"):
            for index in range(len(cluster[role])):
                with (logs / f"{role}-{index}.log").open("wb") as log:
                    processes.append(
                        subprocess.Popen(
                            [PYTHON, "-m", "agents.runtime.server"],
                            env=_task_env(env, cluster, role, index),
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            cwd=REPO,
                        )
                    )
        yield processes
    finally:
        _terminate(processes)


@dataclass
class _Window:
    """CPU and time at the end of the first epoch, to compare with the end of the last."""

    at: float
    machine: float
    ours: dict[str, float]  # CPU seconds so far, per group of our processes


def _window(pids: dict[str, list[int]]) -> _Window:
    ours = {group: sum(cpu_seconds(p) for p in members) for group, members in pids.items()}
    return _Window(time.monotonic(), machine_busy_seconds(), ours)


def _read_epochs(
    stdout: IO[bytes], pids: dict[str, list[int]], on_first_epoch: Callable[[], None]
) -> tuple[list[tuple[int, _Window]], list[str]]:
    """The chief's epoch lines with when they arrived, and all of its output."""
    epochs: list[tuple[int, _Window]] = []
    lines: list[str] = []
    for raw in stdout:
        lines.append(raw.decode(errors="replace").rstrip())
        match = EPOCH_LINE.match(lines[-1])
        if match:
            epochs.append((int(match[1]), _window(pids)))
            if len(epochs) == 1:
                on_first_epoch()
    return epochs, lines


def run_chief(
    cluster: dict[str, list[str]],
    env: dict[str, str],
    plan: Plan,
    logs: Path,
    others: dict[str, list[int]],
    name: str,
    profile: Path | None,
) -> dict[str, Any]:
    """Runs the chief to the end; steps/s between its first and last epoch lines.

    With `profile`, py-spy samples the chief for a few seconds from its first epoch line.
    """
    command = [PYTHON, "examples/digits.py", "--epochs", str(plan.epochs)]
    command += ["--steps-per-epoch", str(plan.steps_per_epoch), "--batch", str(plan.batch)]
    chief = subprocess.Popen(
        command,
        env=_task_env(env, cluster, "chief", 0),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    recorder: list[subprocess.Popen[bytes] | None] = []

    def start_profile() -> None:
        if profile is not None:
            recorder.append(profiling.start(chief.pid, PROFILE_SECONDS, profile))

    try:
        assert chief.stdout is not None
        epochs, lines = _read_epochs(chief.stdout, {"chief": [chief.pid], **others}, start_profile)
        code = chief.wait(timeout=120)
    finally:
        _terminate([chief])
        for spy in recorder:
            profiling.finish(spy)
    (logs / f"{name}-chief.log").write_text("\n".join(lines) + "\n")
    if code != 0 or len(epochs) != plan.epochs:
        tail = "\n".join(lines[-40:])
        raise RuntimeError(f"chief exited {code} after {len(epochs)} epochs:\n{tail}")
    (first, start), (last, end) = epochs[0], epochs[-1]
    seconds = end.at - start.at
    cores = {
        group: round((end.ours[group] - used) / seconds, 3) for group, used in start.ours.items()
    }
    ours = sum(cores.values())
    return {
        "epochs_timed": last - first,
        "seconds": round(seconds, 2),
        "steps_per_s": round((last - first) * plan.steps_per_epoch / seconds, 2),
        "our_cores": round(ours, 2),
        "cores_by_process": cores,
        "others_cores": round((end.machine - start.machine) / seconds - ours, 2),
        "metrics_off_warning": any("metrics off" in line for line in lines),
    }


def run_variant(
    server: Server, plan: Plan, streaming: bool, logs: Path, name: str, profile: Path | None
) -> dict[str, Any]:
    cluster = _cluster(plan.workers)
    env = plain_env()
    with contextlib.ExitStack() as stack:
        job_id = None
        if streaming:
            job_id = stack.enter_context(server.job(JOB_SPEC))
            env |= TaskEnvironment(
                server=server.url,
                task=TaskName(Role.chief, 0),
                attempt=0,
                task_token=server.task_token(job_id),
                job_id=job_id,
            ).to_env()
            # And TensorBoard event files, as a task with a checkpoint dir writes them (without
            # the dir: that would add checkpoints, which plain tf_keras does not write either).
            env[EVENT_FILES_ENV] = str(logs / f"tensorboard-{name}")
        servers = stack.enter_context(task_servers(cluster, env, logs))
        groups = {
            "tf_servers": [p.pid for p in servers],  # the workers and the ps
            "strata_server": [server.process.pid],
        }
        result = run_chief(cluster, env, plan, logs, groups, name, profile)
        if job_id is not None:
            # The chief flushed its points before exiting: they must all be on the server.
            result["points_stored"] = server.stored_points(job_id)
            if result["points_stored"] == 0:
                raise RuntimeError("streaming run stored no metric points")
            events = list((logs / f"tensorboard-{name}").glob("events.out.tfevents.*"))
            result["event_file_bytes"] = sum(path.stat().st_size for path in events)
            if not result["event_file_bytes"]:
                raise RuntimeError("streaming run wrote no TensorBoard event file")
    return result


def check_plain_callbacks() -> list[str]:
    """`runtime.callbacks()` under the plain environment must be [] (B streams nothing)."""
    output = subprocess.run(
        [PYTHON, "-c", CHECK_CALLBACKS],
        env=plain_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if output.returncode != 0:
        raise RuntimeError(f"runtime.callbacks() is not [] without STRATA_*: {output.stdout}")
    return [output.stdout.strip()]


# --- the run -----------------------------------------------------------------------------


def run_pair(
    server: Server,
    plan: Plan,
    conditions: Conditions,
    logs: Path,
    number: int,
    profile_dir: Path | None,
) -> dict[str, Any]:
    pair: dict[str, Any] = {}
    # A first in odd pairs, B first in even ones: whatever drifts within a pair (the
    # server's database, caches, other tenants) does not always favour the same side.
    order = (("a", True), ("b", False)) if number % 2 else (("b", False), ("a", True))
    pair["order"] = "".join(variant.upper() for variant, _ in order)
    for variant, streaming in order:
        background = conditions.wait_quiet()
        profile = None
        if profile_dir is not None:
            profile = profile_dir / f"chief-{'streaming' if streaming else 'plain'}.txt"
        name = f"{number}{variant}"
        pair[variant] = run_variant(server, plan, streaming, logs, name, profile)
        pair[variant]["background_cores_before"] = background
        print(
            f"  pair {number} {variant.upper()} ({'streaming' if streaming else 'plain'}): "
            f"{pair[variant]['steps_per_s']:.1f} steps/s "
            f"(others used {max(0.0, pair[variant]['others_cores']):.2f} cores meanwhile)"
        )
    pair["ratio"] = round(pair["a"]["steps_per_s"] / pair["b"]["steps_per_s"], 4)
    worst = max(pair["a"]["others_cores"], pair["b"]["others_cores"])
    pair["disturbed"] = worst > conditions.disturbed
    return pair


def measure_pairs(
    server: Server, plan: Plan, conditions: Conditions, logs: Path
) -> list[dict[str, Any]]:
    """A/B pairs until `plan.pairs` were undisturbed, or `conditions.extra` more were run."""
    pairs: list[dict[str, Any]] = []
    while len(pairs) < plan.pairs + conditions.extra and len(undisturbed(pairs)) < plan.pairs:
        pairs.append(run_pair(server, plan, conditions, logs, len(pairs) + 1, None))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 pairs of shorter runs (~3 min)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the chief in the first pair (bench/results/profiles/chief-*.txt)",
    )
    args = parser.parse_args(argv)
    profile_dir = RESULTS / "profiles" if args.profile else None
    for stale in profile_dir.glob("chief-*.txt") if profile_dir else []:
        stale.unlink()  # so that the summary covers this run's samples only
    plan = QUICK if args.quick else FULL
    conditions = Conditions(max_wait=10.0, wait_budget=40.0, extra=plan.extra_pairs)
    began = time.monotonic()
    results: dict[str, Any] = {"machine": machine_info(), "config": asdict(plan)}
    results["machine"]["tensorflow"] = metadata.version("tensorflow")
    results["plain_callbacks"] = check_plain_callbacks()
    with (
        tempfile.TemporaryDirectory(prefix="strata-bench-train-") as tmp,
        strata_server() as server,
    ):
        if profile_dir is not None:
            # An extra pair, not summarised: sampling costs the chief CPU on a small machine.
            results["profiled_pair"] = run_pair(server, plan, conditions, Path(tmp), 0, profile_dir)
        pairs = measure_pairs(server, plan, conditions, Path(tmp))
    summarised = undisturbed(pairs)
    results |= {
        "pairs": pairs,
        "summarised_pairs": len(summarised),
        "ratio": spread([p["ratio"] for p in summarised]),
        "steps_per_s": {
            "a": spread([p["a"]["steps_per_s"] for p in summarised]),
            "b": spread([p["b"]["steps_per_s"] for p in summarised]),
        },
        "target": TARGET,
        "conditions": conditions.describe(),
        "wall_seconds": round(time.monotonic() - began, 1),
    }
    if profile_dir is not None:
        results["profiles"] = {
            path.stem: profiling.summarize(path, profiling.CHIEF_STAGES)
            for path in sorted(profile_dir.glob("chief-*.txt"))
        }
    results["machine"]["load_average_at_end"] = os.getloadavg()
    write_result("training_overhead", results)
    report.write()
    ratio = results["ratio"]["median"]
    print(f"A/B median {ratio:.3f} (target ≥ {TARGET}); done in {results['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
