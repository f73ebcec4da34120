"""Training steps/s, warm starts against cold, in pairs with long windows.

    .venv/bin/python -m bench.warm_throughput [--quick] [--pairs N]

bench.launch times five ways of starting each job with a short steps/s window (240 steps,
under 2 s of training under parameter_server) so that all of them fit in one run; on this
shared two-core machine a window that short moves by ±5% from one run to the next, and its
warm ÷ cold ratio has read anywhere from 0.89 to 1.01. This benchmark asks only that one
question, and asks it carefully:

* the same job as bench.launch's `strata` variant (the digits example under Strata, its
  runtime callbacks on), started cold (`warm_start: false`) and warm (every task takes a
  warm process; STRATA_AGENT_WARM_POOL=2 on each of the two agents), one after the other;
* pairs alternate which runs first, so that whatever drifts within a pair favours neither;
* each run trains 1,200 steps between its first and last epoch end (8-15 s), and before it
  the benchmark waits until the warm pools are full again (no refill overlaps a run) and
  the machine is quiet (harness.Conditions); a pair in which other processes took more
  than half a core is marked disturbed and made up for by another, up to `extra`;
* a pair's ratio is warm ÷ cold steps/s; the figure is the median of the undisturbed pairs'
  ratios, per job, beside each side's CPU milliseconds per step by task.

Results go to bench/results/warm_throughput.json; docs/benchmarks.md renders them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.harness import Conditions, machine_info, spread, undisturbed, write_result
from bench.launch import (
    REFILLS,
    REST,
    STRATEGIES,
    Plan,
    run_under_strata,
    wait_pools_full,
    with_rest,
)
from bench.recovery import WARM_POOL
from tests.support.cluster import Cluster, local_cluster

TARGET = 0.98  # warm ÷ cold steps/s: a warm process trains as fast
MODES = ("cold", "warm")


@dataclass(frozen=True)
class Throughput:
    pairs: int  # undisturbed pairs wanted per job
    epochs: int
    steps_per_epoch: int
    extra: int  # pairs run at most to make up for disturbed ones, per job

    def plan(self) -> Plan:
        return Plan(runs=1, epochs=self.epochs, steps_per_epoch=self.steps_per_epoch)


FULL = Throughput(pairs=8, epochs=41, steps_per_epoch=30, extra=3)
QUICK = Throughput(pairs=2, epochs=21, steps_per_epoch=30, extra=0)


def others_cores(run: dict[str, Any]) -> float:
    """Cores that processes other than the job's, the control plane's and the pools' refills
    took in the steps/s window: the machine's CPU per step less theirs, times steps/s."""
    cpu = with_rest(run["cpu_ms_per_step"])
    others_ms = cpu[REST] - cpu.get(REFILLS, 0.0)
    return round(max(0.0, others_ms) * float(run["steps_per_s"]) / 1000, 2)


def run_mode(
    cluster: Cluster, strategy: str, throughput: Throughput, mode: str, number: int
) -> dict[str, Any]:
    run = run_under_strata(cluster, strategy, throughput.plan(), number, warm=mode == "warm")
    measured = asdict(run)
    measured["others_cores"] = others_cores(measured)
    return measured


def run_pair(
    cluster: Cluster, strategy: str, throughput: Throughput, conditions: Conditions, number: int
) -> dict[str, Any]:
    order = MODES if number % 2 else MODES[::-1]
    pair: dict[str, Any] = {"order": "-".join(order)}
    for mode in order:
        wait_pools_full(cluster, agents=2)
        background = conditions.wait_quiet()
        pair[mode] = run_mode(cluster, strategy, throughput, mode, number)
        pair[mode]["background_cores_before"] = background
        print(
            f"  {strategy} pair {number} {mode}: {pair[mode]['steps_per_s']:.1f} steps/s "
            f"(others took {pair[mode]['others_cores']:.2f} cores meanwhile)",
            flush=True,
        )
    pair["ratio"] = round(pair["warm"]["steps_per_s"] / pair["cold"]["steps_per_s"], 4)
    pair["disturbed"] = max(pair[m]["others_cores"] for m in MODES) > conditions.disturbed
    return pair


def measure(throughput: Throughput, conditions: Conditions, workdir: Path) -> dict[str, Any]:
    pairs: dict[str, list[dict[str, Any]]] = {strategy: [] for strategy in STRATEGIES}
    os.environ["STRATA_AGENT_WARM_POOL"] = str(WARM_POOL)
    with local_cluster(workdir / "cluster", agents=2, gpus_per_agent=2) as cluster:
        for strategy in STRATEGIES:
            done = pairs[strategy]
            budget = throughput.pairs + throughput.extra
            while len(done) < budget and len(undisturbed(done)) < throughput.pairs:
                done.append(run_pair(cluster, strategy, throughput, conditions, len(done) + 1))
    return pairs


def summarise(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The undisturbed pairs' warm ÷ cold ratios, each side's steps/s, and CPU per step."""
    used = undisturbed(pairs)
    summary: dict[str, Any] = {
        "pairs": len(used),
        "disturbed_pairs": sum(1 for pair in pairs if pair["disturbed"]),
        "ratio": spread([pair["ratio"] for pair in used]),
        "warm_faster_in": sum(1 for pair in used if pair["ratio"] >= 1),
    }
    for mode in MODES:
        runs = [pair[mode] for pair in used]
        per_step = [with_rest(run["cpu_ms_per_step"]) for run in runs]
        names = sorted({name for run in per_step for name in run})
        summary[mode] = {
            "steps_per_s": spread([run["steps_per_s"] for run in runs]),
            "cpu_ms_per_step": {
                name: spread([run[name] for run in per_step if name in run]) for name in names
            },
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 pairs of shorter runs (~4 min)")
    parser.add_argument("--pairs", type=int, default=None, help="undisturbed pairs per job")
    args = parser.parse_args(argv)
    throughput = QUICK if args.quick else FULL
    if args.pairs is not None:
        throughput = Throughput(**{**asdict(throughput), "pairs": args.pairs})
    conditions = Conditions(max_wait=10.0, wait_budget=120.0, extra=throughput.extra)
    began = time.monotonic()
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="strata-bench-warm-") as tmp:
        pairs = measure(throughput, conditions, Path(tmp))
    result = {
        "machine": machine,
        "plan": asdict(throughput),
        "window_steps": throughput.steps_per_epoch * (throughput.epochs - 1),
        "quick": args.quick,
        "conditions": conditions.describe(),
        "target": TARGET,
        "pairs": pairs,
        "summary": {strategy: summarise(found) for strategy, found in pairs.items()},
        "seconds": round(time.monotonic() - began, 1),
    }
    write_result("warm_throughput", result)
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
