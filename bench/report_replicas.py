"""The several-servers section of docs/benchmarks.md, from bench/results/replicas.json."""

from __future__ import annotations

from typing import Any

from bench.text import spread_text

TAKEOVER_TARGET_SECONDS = 5.0


def _seconds(values: dict[str, float]) -> str:
    return spread_text(values, digits=2, unit=" s")


def replicas_rows(result: dict[str, Any]) -> list[list[str]]:
    failover, requests = result["failover"], result["requests"]
    median = failover["placed_seconds"]["median"]
    one, two = requests["one_replica"], requests["two_replicas"]
    return [
        [
            f"Leader SIGKILL → a job submitted then placed ({len(failover['runs'])} runs)",
            _seconds(failover["placed_seconds"]),
            f"≤ {TAKEOVER_TARGET_SECONDS:.0f} s",
            "yes" if median <= TAKEOVER_TARGET_SECONDS else "**no**",
        ],
        [
            f"GET /jobs p99 at {requests['agents']:,} agents, two replicas ÷ one",
            f"{two['p99_ms'] / one['p99_ms']:.2f} "
            f"({two['p99_ms']:.0f} ms ÷ {one['p99_ms']:.0f} ms)",
            "—",
            "—",
        ],
    ]


def replicas_section(result: dict[str, Any]) -> list[str]:
    failover, requests = result["failover"], result["requests"]
    one, two = requests["one_replica"], requests["two_replicas"]
    lines = [
        "## Several servers: takeover and forwarding",
        "",
        "`bench/replicas.py`: three `strata server` replicas on a throwaway PostgreSQL cluster",
        "behind HAProxy, one real agent, the default lease (4 s) and heartbeat timeout (6 s).",
        "Each run SIGKILLs the leader and at once submits a one-task job through the load",
        "balancer (a follower holds it until a replica leads); the killed replica is started",
        "again as a follower before the next run. Seconds after the kill, median [min-max]:",
        "",
        "| Run | Another replica leads | Submission acknowledged | Job placed | Job running |",
        "| --- | --- | --- | --- | --- |",
    ]
    for index, run in enumerate(failover["runs"], 1):
        lines.append(
            f"| {index} | {run['led_seconds']:.2f} | {run['acknowledged_seconds']:.2f} "
            f"| {run['placed_seconds']:.2f} | {run['running_seconds']:.2f} |"
        )
    lines += [
        f"| all | {_seconds(failover['led_seconds'])} "
        f"| {_seconds(failover['acknowledged_seconds'])} "
        f"| {_seconds(failover['placed_seconds'])} "
        f"| {_seconds(failover['running_seconds'])} |",
        "",
        "Where the time goes: the dead leader's lease runs out (up to its 4 s, from its last",
        "renewal, a third of that before the kill at most), a follower takes it as it expires",
        "(it read the expiry at its last attempt), and the new leader's first pass places the",
        "job the follower was holding. From placed to running, the agent, whose channel went",
        "to the dead leader, reconnects through the load balancer (its backoff is jittered",
        "over up to a few seconds, so that a fleet does not reconnect at once) and starts it.",
        "",
        f"`GET /jobs` with {requests['agents']:,} simulated agents heartbeating (bench.scale's)",
        f"and 50 running jobs, {requests['requests']} requests one after another, against one",
        "replica and against two behind HAProxy (agents and requests through it: half the",
        "requests reach the follower, which forwards them to the leader), in the same run:",
        "",
        "| Servers | p50 | p99 |",
        "| --- | --- | --- |",
        f"| one replica | {one['p50_ms']:.1f} ms | {one['p99_ms']:.1f} ms |",
        f"| two replicas, through the load balancer | {two['p50_ms']:.1f} ms "
        f"| {two['p99_ms']:.1f} ms |",
        "",
        "A follower answers nothing from its own memory: every request takes one more hop",
        "(the follower, then the leader), and the leader still does all the work. A second",
        "replica buys availability, not throughput.",
        "",
    ]
    return lines
