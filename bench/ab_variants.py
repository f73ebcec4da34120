"""The variants of the A/B launch benchmark (bench/ab.py): the by-hand start with one of
Strata's differences added at a time, and Strata itself.

Each by-hand variant is a set of `Knobs`, each knob one thing the agent does to a task that a
hand-written script does not. "hand" turns none on; "hand+all" turns on every knob at once, to
check that the single costs add up to the gap to "strata".
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

Runtime = Literal["off", "backups", "full"]


@dataclass(frozen=True)
class Knobs:
    """What a by-hand start takes over from the agent's way of starting a task."""

    # The environment the agent gives a task (agents.host.launcher.task_env over the server's
    # start message), less the variables that switch the runtime library on.
    env: bool = False
    # Only TF_GRPC_DEFAULT_OPTIONS, as the agent sets it for every task.
    grpc_options: bool = False
    # stdout and stderr into pipes, read and cut into lines by the agent's own code
    # (OutputProtocol, TaskOutput, LineSplitter) instead of into a file.
    pipes: bool = False
    # Its own session (so, where the kernel has autogroups, its own scheduling group) and
    # SIGKILL when the parent dies, as the agent spawned tasks before.
    session: bool = False
    # Its own process group in its parent's session and SIGKILL when the parent dies, as the
    # agent spawns now.
    group: bool = False
    # The agent's containment: a cgroup per task in the hierarchies it would use (a v2 cgroup
    # with cgroup.kill, a v1 freezer, the memory controller), joined before exec.
    cgroup: bool = False
    # With `cgroup`: the memory controller's cgroup too (v1 memory, or v2 with the memory
    # controller), which charges every page the task maps; off: only the killing one.
    memory_cgroup: bool = True
    # The live agent's nice value, scheduling policy and CPU affinity.
    agent_sched: bool = False
    # TensorFlow's intra-op thread pool sized to the task's share of the host's cores (its
    # CPUs over the job's tasks on the host, at least 1) instead of every core.
    threads: bool = False
    # parameter_server: workers and ps run `python -m agents.runtime.server`, not the script.
    server_entry: bool = False
    # Started as a warm process (agents.host.warm, TensorFlow imported before the task is
    # given to it over its socket), its output on pipes as the agent's are.
    warm: bool = False
    # With `warm`: its import at SCHED_IDLE, as the agent's warm pool has it where it can.
    idle_import: bool = True
    # The runtime library: "backups" gives the task a checkpoint dir only (BackupAndRestore
    # and StrataCheckpoints, nothing streamed); "full" also lets it stream to the cluster's
    # server (StrataMetrics, the sender, TensorBoard event files) for a job kept pending.
    runtime: Runtime = "off"
    # The chief (or an MWM worker) through bench.local_reads: the runtime's coordinator-side
    # copy of steps_per_execution without the rest of the runtime.
    local_reads: bool = False


STRATA_VARIANTS = ("strata", "strata-bare", "strata-warm")

HAND_VARIANTS: dict[str, Knobs] = {
    "hand": Knobs(),
    # The baseline again, as if it were a variant: what the order of the runs and the noise
    # alone make of a ratio (an A/A check).
    "hand-again": Knobs(),
    "hand+env": Knobs(env=True),
    "hand+grpc-options": Knobs(grpc_options=True),
    "hand+pipes": Knobs(pipes=True),
    "hand+session": Knobs(session=True),
    "hand+group": Knobs(group=True),
    "hand+cgroup": Knobs(cgroup=True),
    "hand+cgroup-no-memory": Knobs(cgroup=True, memory_cgroup=False),
    "hand+agent-sched": Knobs(agent_sched=True),
    "hand+threads": Knobs(threads=True),
    "hand+server-entry": Knobs(server_entry=True),
    "hand+warm": Knobs(warm=True),
    "hand+warm-busy-import": Knobs(warm=True, idle_import=False),
    "hand+backups": Knobs(runtime="backups"),
    "hand+runtime-callbacks": Knobs(runtime="full"),
    "hand+local-reads": Knobs(local_reads=True),
    "hand+all": Knobs(
        env=True,
        grpc_options=True,
        pipes=True,
        group=True,
        cgroup=True,
        agent_sched=True,
        server_entry=True,
        runtime="full",
    ),
}

# `hand+all` less one way at a time: which of them, together, cost what none costs alone.
_ALL = HAND_VARIANTS["hand+all"]
HAND_VARIANTS |= {
    "hand+all-env": replace(_ALL, env=False, grpc_options=False),
    "hand+all-pipes": replace(_ALL, pipes=False),
    "hand+all-group": replace(_ALL, group=False),
    "hand+all-cgroup": replace(_ALL, cgroup=False),
    "hand+all-agent-sched": replace(_ALL, agent_sched=False),
    "hand+all-server-entry": replace(_ALL, server_entry=False),
    "hand+all-runtime": replace(_ALL, runtime="off"),
}

ALL_VARIANTS = (*HAND_VARIANTS, *STRATA_VARIANTS)
DEFAULT_VARIANTS = (
    "hand",
    "hand+env",
    "hand+pipes",
    "hand+session",
    "hand+group",
    "hand+cgroup",
    "hand+agent-sched",
    "hand+server-entry",
    "hand+runtime-callbacks",
    "hand+all",
    "strata",
)
BASELINE = "hand"


class VariantError(ValueError):
    """A variant list that names an unknown variant or leaves out the baseline."""


def parse_variants(text: str) -> list[str]:
    """A comma-separated list of variant names, in order, without repeats; it must hold the
    baseline, "hand", which every ratio is taken against."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL_VARIANTS]
    if unknown:
        raise VariantError(
            f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(ALL_VARIANTS)}"
        )
    if BASELINE not in names:
        raise VariantError(f"the variants must include {BASELINE!r}, the baseline of every ratio")
    return list(dict.fromkeys(names))


def describe(knobs: Knobs) -> list[str]:
    """The knobs that are on, by name (with the runtime's level), for the results file."""
    base = Knobs()
    skip = {"runtime", "idle_import", "memory_cgroup"}
    on = [f.name for f in fields(knobs) if f.name not in skip and getattr(knobs, f.name)]
    if knobs.warm and not knobs.idle_import:
        on.append("busy_import")
    if knobs.cgroup and not knobs.memory_cgroup:
        on.append("no_memory_cgroup")
    if knobs.runtime != base.runtime:
        on.append(f"runtime={knobs.runtime}")
    return on


def for_strategy(knobs: Knobs, strategy: str) -> Knobs:
    """`server_entry` only means something under parameter_server."""
    return knobs if strategy == "parameter_server" else replace(knobs, server_entry=False)


def rotated(variants: list[str], round_number: int) -> list[str]:
    """This round's order: rotated by one each round, so that whatever drifts during a run
    favours no variant, and reversed every other round, so that no variant always follows the
    same one (what ran just before leaves the page cache and the CPU caches its way)."""
    shift = round_number % len(variants)
    order = variants[shift:] + variants[:shift]
    return order[::-1] if round_number % 2 else order
