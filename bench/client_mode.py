"""Client mode against a chief, side by side in one run, on `strata up` (2 agents).

    .venv/bin/python -m bench.client_mode [--rounds N] [--quick]

Each round runs bench/launch.py's digits parameter_server job twice, in alternating order:
with its chief on the cluster (examples/digits.py), and with `coordinator: client`, its
workers and ps on the cluster and the coordinator a process of its own (bench/client_run.py)
that has TensorFlow imported already, as a notebook kernel would. For the client: seconds
from calling `runtime.connect` (the job running) to its first training step done; for both:
steps/s between the first and the last epoch end, and their ratio per round. Results in
bench/results/client_mode.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import REPO, spread, write_result
from bench.launch import FULL, QUICK, Plan, job_spec, read_run, run_under_strata
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

CONNECT = re.compile(r"bench-client: connect at wall_time=([0-9.]+)")
TARGET_CONNECT_S = 3.0
TARGET_RATIO = 0.95
SUMMARISED = ("chief_steps_per_s", "client_steps_per_s", "ratio", "connect_to_first_step_s")


def client_spec(plan: Plan, number: int) -> dict[str, Any]:
    spec = job_spec("parameter_server", plan, number)
    spec["name"] = f"bench-client-{number}"
    spec["coordinator"] = "client"
    spec["entrypoint"] = []
    del spec["replicas"]["chief"]
    return spec


def run_client(cluster: Cluster, plan: Plan, number: int) -> dict[str, float]:
    job_id = cluster.submit(client_spec(plan, number))["id"]
    try:
        cluster.wait_status(job_id, "running")
        argv = [str(job_id), str(plan.epochs), str(plan.steps_per_epoch), str(plan.batch)]
        done = subprocess.run(
            [sys.executable, "-m", "bench.client_run", *argv],
            env={
                **os.environ,
                "STRATA_SERVER": cluster.url,
                "STRATA_TOKEN": cluster.admin_token,
            },
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = done.stdout.splitlines()
        connect = next((float(m[1]) for line in lines if (m := CONNECT.search(line))), None)
        read = read_run(lines, connect or 0.0, plan)
        if done.returncode != 0 or connect is None or read is None:
            raise RuntimeError(f"client run {number} failed: {done.stderr[-2000:]}")
        run, _ = read
        return {"connect_to_first_step_s": run.launch_s, "steps_per_s": run.steps_per_s}
    finally:
        cluster.http.post(f"/jobs/{job_id}/cancel")
        wait_no_processes(job_id, server=cluster.url, timeout=60)


def measure(plan: Plan, workdir: Path) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    with local_cluster(workdir / "cluster", agents=2, gpus_per_agent=2) as cluster:
        for number in range(plan.runs):
            result: dict[str, Any] = {}
            # Alternating order, so that a drift of the machine favours neither.
            for side in ("chief", "client") if number % 2 == 0 else ("client", "chief"):
                if side == "chief":
                    chief = run_under_strata(cluster, "parameter_server", plan, number)
                    result["chief_steps_per_s"] = chief.steps_per_s
                else:
                    client = run_client(cluster, plan, number)
                    result["client_steps_per_s"] = client["steps_per_s"]
                    result["connect_to_first_step_s"] = client["connect_to_first_step_s"]
            result["ratio"] = result["client_steps_per_s"] / result["chief_steps_per_s"]
            print(f"  round {number + 1}: {result}", flush=True)
            rounds.append(result)
    return {
        "plan": plan.__dict__,
        "rounds": rounds,
        "summary": {
            key: spread([r[key] for r in rounds])
            for key in (
                "chief_steps_per_s",
                "client_steps_per_s",
                "ratio",
                "connect_to_first_step_s",
            )
        },
        "targets": {"connect_to_first_step_s": TARGET_CONNECT_S, "ratio": TARGET_RATIO},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = dataclasses.replace(plan, runs=args.rounds)
    workdir = Path(tempfile.mkdtemp(prefix="strata-bench-client-"))
    result = measure(plan, workdir)
    print(result["summary"])
    print(write_result("client_mode", result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
