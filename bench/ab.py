"""A/B of starting a job by hand against Strata, one of Strata's differences at a time.

    .venv/bin/python -m bench.ab [--rounds N] [--variants hand,hand+env,...,strata]
                                 [--strategies parameter_server,multi_worker_mirrored] [--quick]
    .venv/bin/python -m bench.ab --list      # the variants and the knobs each turns on

bench/launch.py's digits jobs (parameter_server: 1 chief, 2 workers, 1 ps; multi_worker_mirrored:
2 workers), started by hand with none, one or all of the agent's ways of starting a task
(bench/ab_variants.py: its environment, its pipes, its session, its cgroups, its scheduling,
the runtime's server entry point, the runtime library), and under Strata (`strata up`, 2 agents,
as bench/launch.py). Every round runs every variant once, in an order rotated from round to
round and reversed every other round; all of them beside the same running cluster, so that the
control plane's idle work is in every variant alike. Before each run the agents' warm pools are
full again (no import overlaps a measured run).

For each variant: the lead task's steps/s (first → last epoch end) and each task's CPU per
training step in that window, as median [min-max] over the rounds, and both as ratios to "hand"
in the same round. Steps/s is what counts: on a machine whose cores are not all busy, CPU per
step also grows when the same processes merely wait longer (gRPC pollers and thread pools spin
while they wait), so a higher CPU per step with lower steps/s may be an effect, not a cause.

With a runtime variant selected, a job with the same tasks is kept pending on the cluster
(its workers ask for more GPUs than an agent has) so that the by-hand tasks can report to the
server as that job's attempt 0; it is cancelled at the end. Results: bench/results/launch_ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from agents.host.containment import Containments, namespace_for
from bench.ab_env import UNUSED_JOB_ID, Job, Scheduling
from bench.ab_hand import Setting, run_hand
from bench.ab_variants import (
    BASELINE,
    DEFAULT_VARIANTS,
    HAND_VARIANTS,
    STRATA_VARIANTS,
    VariantError,
    describe,
    for_strategy,
    parse_variants,
    rotated,
)
from bench.harness import machine_info, spread, write_result
from bench.launch import FULL, QUICK, STRATEGIES, Plan, Run, job_spec, run_under_strata, tasks_of
from bench.launch import wait_pools_full as pools_full
from bench.recovery import WARM_POOL
from tests.support.cluster import Cluster, local_cluster

AGENTS = 2
DEFAULT_ROUNDS = 8


def pending_spec(strategy: str, plan: Plan) -> dict[str, Any]:
    """bench/launch.py's job, its workers asking for more GPUs than an agent has: never placed,
    its tasks' attempt 0 exist, which is all the runtime's channel needs."""
    spec = job_spec(strategy, plan, 0)
    spec["name"] = f"bench-ab-pending-{strategy.replace('_', '-')}"
    spec["replicas"]["worker"]["gpus"] = 3
    return spec


def setting_for(
    cluster: Cluster, strategy: str, plan: Plan, variants: list[str], workdir: Path
) -> Setting:
    knobs = [HAND_VARIANTS[v] for v in variants if v in HAND_VARIANTS]
    workdir.mkdir(parents=True, exist_ok=True)  # the by-hand runs' logs go under it
    job_id = UNUSED_JOB_ID
    spec = job_spec(strategy, plan, 0)
    if any(k.runtime != "off" for k in knobs):
        spec = pending_spec(strategy, plan)
        job_id = cluster.submit(spec)["id"]
    job = Job(spec, job_id, cluster.url, cluster.admin_token, workdir / "checkpoints")
    setting = Setting(job=job, server_pid=cluster.process.pid, agent_pids=cluster.agent_pids())
    if any(k.cgroup for k in knobs):
        # The bench process becomes a child subreaper where there are no cgroups (as an agent).
        setting.containments = Containments.probe(namespace_for(f"bench-ab-{os.getpid()}", ""))
    if any(k.agent_sched for k in knobs):
        setting.agent_scheduling = Scheduling.of(cluster.agent_pids()[0])
    return setting


def run_variant(
    cluster: Cluster, strategy: str, variant: str, plan: Plan, number: int, setting: Setting
) -> Run:
    if variant in STRATA_VARIANTS:
        return run_under_strata(
            cluster,
            strategy,
            plan,
            number,
            runtime_callbacks=variant != "strata-bare",
            warm=variant == "strata-warm",
            run_delay=True,
        )
    knobs = for_strategy(HAND_VARIANTS[variant], strategy)
    return run_hand(strategy, plan, knobs, setting, setting.job.checkpoint_root.parent)


def measure(
    plan: Plan, strategies: list[str], variants: list[str], workdir: Path
) -> tuple[dict[str, dict[str, list[dict[str, Any] | None]]], dict[str, Any]]:
    runs: dict[str, dict[str, list[dict[str, Any] | None]]] = {
        strategy: {variant: [] for variant in variants} for strategy in strategies
    }
    about: dict[str, Any] = {}
    os.environ["STRATA_AGENT_WARM_POOL"] = str(WARM_POOL)
    with local_cluster(workdir / "cluster", agents=AGENTS, gpus_per_agent=2) as cluster:
        settings = {s: setting_for(cluster, s, plan, variants, workdir / s) for s in strategies}
        about = describe_settings(settings)
        try:
            for number in range(plan.runs):
                for strategy in strategies:
                    for variant in rotated(variants, number):
                        pools_full(cluster, agents=AGENTS)
                        runs[strategy][variant].append(
                            one_run(cluster, strategy, variant, plan, number, settings[strategy])
                        )
        finally:
            for setting in settings.values():
                if setting.job.job_id != UNUSED_JOB_ID:
                    cluster.http.post(f"/jobs/{setting.job.job_id}/cancel")
                if setting.containments is not None:
                    setting.containments.close()
    return runs, about


def one_run(
    cluster: Cluster, strategy: str, variant: str, plan: Plan, number: int, setting: Setting
) -> dict[str, Any] | None:
    """One run's figures; None when it failed (said on the console; the round's pairs with it
    are left out of the ratios)."""
    try:
        run = run_variant(cluster, strategy, variant, plan, number, setting)
    except (RuntimeError, TimeoutError, AssertionError) as exc:
        print(f"  round {number + 1} {strategy} {variant}: FAILED: {exc}", flush=True)
        return None
    print(f"  round {number + 1} {strategy} {variant}: {run.steps_per_s:.1f} steps/s", flush=True)
    return asdict(run)


def describe_settings(settings: dict[str, Setting]) -> dict[str, Any]:
    """What the knobs meant on this host: the containment found, the agent's scheduling
    against this process's own (a knob that changes nothing here says so)."""
    first = next(iter(settings.values()))
    own = Scheduling.of(os.getpid())
    agent = first.agent_scheduling
    return {
        "containment": first.containments.kind if first.containments is not None else None,
        "agent_scheduling": agent.describe() if agent is not None else None,
        "bench_scheduling": own.describe(),
        "agent_scheduling_differs": agent is not None and agent != own,
        "pending_jobs": {s: x.job.job_id for s, x in settings.items()},
    }


def by_name(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per name (a task, "machine", ...): its spread over the runs that have it."""
    names = sorted({name for run in runs for name in run})
    return {name: spread([run[name] for run in runs if name in run]) for name in names}


def cpu_ratios(
    pairs: list[tuple[dict[str, Any], dict[str, Any]]], tasks: list[str]
) -> dict[str, dict[str, float]]:
    """Each task's CPU per step over the baseline's, round by round."""
    found: dict[str, dict[str, float]] = {}
    for task in tasks:
        ratios = []
        for run, base in pairs:
            one = (run["cpu_ms_per_step"] or {}).get(task)
            other = (base["cpu_ms_per_step"] or {}).get(task)
            if one is not None and other:
                ratios.append(one / other)
        if ratios:
            found[task] = spread(ratios)
    return found


def summarise(runs: dict[str, dict[str, list[dict[str, Any] | None]]]) -> dict[str, Any]:
    """Per strategy and variant: steps/s and each task's CPU per step, as spreads, and both
    as ratios to the baseline run of the same round."""
    summary: dict[str, Any] = {}
    for strategy, by_variant in runs.items():
        tasks = [f"{role}:{index}" for role, index in tasks_of(strategy)]
        base = by_variant[BASELINE]
        entry: dict[str, Any] = {}
        for variant, measured in by_variant.items():
            done = [r for r in measured if r is not None]
            if not done:
                entry[variant] = {"failed": len(measured)}
                continue
            cpu = [r["cpu_ms_per_step"] or {} for r in done]
            waits = [r.get("run_delay_ms_per_step") or {} for r in done]
            figures: dict[str, Any] = {
                "runs": len(done),
                "steps_per_s": spread([r["steps_per_s"] for r in done]),
                "machine_cores": spread([r["machine_cores"] for r in done]),
                "cpu_ms_per_step": by_name(cpu),
                "run_delay_ms_per_step": by_name(waits),
            }
            pairs = [(r, b) for r, b in zip(measured, base, strict=True) if r and b]
            if variant != BASELINE and pairs:
                steps = [r["steps_per_s"] / b["steps_per_s"] for r, b in pairs]
                figures["steps_ratio"] = spread(steps)
                figures["cpu_ratio"] = cpu_ratios(pairs, tasks)
            entry[variant] = figures
        summary[strategy] = entry
    return summary


def table(summary: dict[str, Any]) -> str:
    """The summary as text: one line per variant."""
    out = []
    for strategy, entry in summary.items():
        out.append(
            f"{strategy}:  variant | steps/s | ÷ hand | CPU ms/step by task (÷ hand)"
            " | run-queue wait ms/step by task"
        )
        for variant, figures in entry.items():
            if "failed" in figures:
                out.append(f"  {variant}: all {figures['failed']} runs failed")
                continue
            steps = _spread_text(figures["steps_per_s"], 1)
            vs = _spread_text(figures["steps_ratio"], 3) if "steps_ratio" in figures else "—"
            cpu = ", ".join(
                f"{task} {s['median']:.2f}"
                + (f" ({r['median']:.3f})" if (r := figures.get("cpu_ratio", {}).get(task)) else "")
                for task, s in figures["cpu_ms_per_step"].items()
                if task != "machine"
            )
            wait = ", ".join(
                f"{task} {s['median']:.2f}" for task, s in figures["run_delay_ms_per_step"].items()
            )
            out.append(f"  {variant} | {steps} | {vs} | {cpu} | waited for a CPU: {wait}")
    return "\n".join(out)


def _spread_text(s: dict[str, float], digits: int) -> str:
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="\n".join((__doc__ or "").splitlines()[5:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every variant (8)")
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="comma-separated, must include 'hand' (default: %(default)s)",
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="2 rounds of shorter jobs")
    parser.add_argument("--list", action="store_true", help="print the variants and exit")
    parser.add_argument(
        "--label", default="", help="results in launch_ab_LABEL.json instead of launch_ab.json"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name, knobs in HAND_VARIANTS.items():
            on = ", ".join(describe(knobs)) or "none (the baseline)"
            print(f"{name}: {on}")
        for name in STRATA_VARIANTS:
            print(f"{name}: POST /jobs to `strata up` (see bench/launch.py)")
        return 0
    try:
        variants = parse_variants(args.variants)
    except VariantError as exc:
        print(f"--variants: {exc}", file=sys.stderr)
        return 2
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        print(f"--strategies: unknown {unknown}; known: {', '.join(STRATEGIES)}", file=sys.stderr)
        return 2
    plan = QUICK if args.quick else replace(FULL, runs=DEFAULT_ROUNDS)
    if args.rounds is not None:
        if args.rounds < 1:
            print(f"--rounds must be at least 1, got {args.rounds}", file=sys.stderr)
            return 2
        plan = replace(plan, runs=args.rounds)
    began, machine = time.monotonic(), machine_info()
    with tempfile.TemporaryDirectory(prefix="strata-bench-ab-") as tmp:
        runs, about = measure(plan, strategies, variants, Path(tmp))
    summary = summarise(runs)
    result = {
        "machine": machine,
        "plan": asdict(plan),
        "variants": {
            v: describe(HAND_VARIANTS[v]) if v in HAND_VARIANTS else [v] for v in variants
        },
        "setting": about,
        "runs": runs,
        "summary": summary,
        "seconds": round(time.monotonic() - began, 1),
    }
    write_result(f"launch_ab_{args.label}" if args.label else "launch_ab", result)
    print(table(summary))
    print(json.dumps(about, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
