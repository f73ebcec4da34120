"""The benchmark page's A/B section: what each difference was worth, then every run kept.

The tables come from `bench.report_ab`; this module holds the prose around them, written from
the results files so that a new run rewrites the figures it quotes.
"""

from __future__ import annotations

from typing import Any

from bench.launch import SERVER
from bench.report_ab import (
    VARIANTS,
    ab_table,
    ratio_between,
    ratio_text,
    strata_variants,
)

# The runs behind the section, each with what it set out to show: the main run (bench.ab's
# default results file) and the experiments kept beside it (`--label`).
EXPERIMENTS = (
    (
        "launch_ab",
        "Strata against by hand as it starts tasks now, cold and warm (the summary's rows), "
        "beside by hand with the runtime's copy of steps_per_execution alone and with the "
        "whole runtime library",
    ),
    (
        "launch_ab_reads",
        "the first run with steps_per_execution read from a copy in the chief (parameter_server "
        "only then)",
    ),
    (
        "launch_ab_mwm_before",
        "multi_worker_mirrored, the runtime's parts, before either change: its backups "
        "assigned the batch to a mirrored variable at every step",
    ),
    (
        "launch_ab_mwm_after",
        "the same after both changes (the backups alone do not keep the copy of "
        "steps_per_execution: that comes with `StrataMetrics`)",
    ),
    (
        "launch_ab_before_reads",
        "the main run before steps_per_execution was read from a copy; the machine slowed "
        "during this run (by hand, multi_worker_mirrored went from 82 to 63 steps/s), which "
        "the rounds share",
    ),
    (
        "launch_ab_aa",
        "the baseline run twice (A/A), to show what order and noise alone make of a ratio, "
        "beside a process group per task and Strata",
    ),
    (
        "launch_ab_ps_group",
        "a session per task (the agent before) against a process group per task (the agent now)",
    ),
    (
        "launch_ab_parts",
        "Strata's parts, before the metric sender batched a trickle of points (it sent a batch "
        "about every 100 ms whatever its size)",
    ),
    (
        "launch_ab_threads",
        "the intra-op pool at the task's share of the cores; the sender already batching a trickle",
    ),
    (
        "launch_ab_warm",
        "by hand, each task started in a warm process of its own (agents.host.warm, through the "
        "warm pool's own assignment), with and without its idle-priority import, beside "
        "Strata cold and warm",
    ),
    (
        "launch_ab_cgroup",
        "the agent's cgroup per task again, with and without the memory controller's, beside "
        "an A/A, 6 rounds",
    ),
    (
        "launch_ab_all",
        "every way of the agent's at once by hand (`hand+all`) against Strata and an A/A, 8 rounds",
    ),
    (
        "launch_ab_all_less_one",
        "`hand+all` less one way at a time, beside `hand+all` and an A/A, 4 rounds",
    ),
    (
        "launch_ab_knobs",
        "one of the agent's ways at a time; measured while the agent still gave each task a "
        "session of its own (so `hand+all` has the session, not the group)",
    ),
)


def _cpu_ratio_of(results: dict[str, dict[str, Any]], name: str, job: str, variant: str) -> str:
    """Each task's CPU per step ÷ by hand's (medians), as "chief:0 0.65, ps:0 0.77"."""
    figures = results.get(name, {}).get("summary", {}).get(job, {}).get(variant, {})
    ratios = figures.get("cpu_ratio", {})
    return ", ".join(f"{t} {r['median']:.2f}" for t, r in ratios.items()) or "not measured"


def _ratio_of(results: dict[str, dict[str, Any]], name: str, job: str, variant: str) -> str:
    figures = results.get(name, {}).get("summary", {}).get(job, {}).get(variant, {})
    return ratio_text(figures["steps_ratio"]) if "steps_ratio" in figures else "not measured"


def _server_growth(results: dict[str, dict[str, Any]], name: str, job: str) -> str:
    """The server's CPU per step with the runtime library streaming over without it (by hand
    with and without it, beside the same cluster)."""
    entry = results.get(name, {}).get("summary", {}).get(job, {})
    try:
        with_it = entry["hand+runtime-callbacks"]["cpu_ms_per_step"][SERVER]["median"]
        without = entry["hand"]["cpu_ms_per_step"][SERVER]["median"]
    except KeyError:
        return "not measured"
    return f"{with_it / without:.2f}x"


def findings(results: dict[str, dict[str, Any]]) -> list[str]:
    """What each difference was worth, in steps/s ÷ by hand, from the runs kept."""
    ps, mwm, runtime = "parameter_server", "multi_worker_mirrored", "hand+runtime-callbacks"
    return [
        "What each difference was worth (steps/s ÷ by hand, from the runs below):",
        "",
        "- **Better than by hand: `steps_per_execution` read from a copy.** tf_keras reads "
        "the model's `steps_per_execution` variable before every step. Under parameter_server "
        "it lives on the ps: every step cost the chief's training thread a synchronous round "
        "trip and the ps the work of serving it, by hand as under Strata (the largest single "
        "item in a py-spy profile of the chief). The runtime now keeps a copy of it in the "
        "process between the variable's writes (`agents/runtime/step_reads.py`). By hand with "
        f"only that copy: {_ratio_of(results, 'launch_ab', ps, 'hand+local-reads')}, "
        f"with the whole runtime library {_ratio_of(results, 'launch_ab', ps, runtime)} "
        f"(parameter_server); in the first run after it Strata (warm) made "
        f"{_ratio_of(results, 'launch_ab_reads', ps, 'strata-warm')}, CPU per step ÷ by hand "
        f"{_cpu_ratio_of(results, 'launch_ab_reads', ps, 'strata-warm')}. Under "
        "multi_worker_mirrored it is a MirroredVariable, ~0.1 ms of CPU per read: by hand "
        f"with the copy {_ratio_of(results, 'launch_ab', mwm, 'hand+local-reads')}.",
        "- **Backups under multi_worker_mirrored: a per-step assign removed, no gain seen.** "
        "With TensorFlow's "
        "save before preemption on, tf_keras's BackupAndRestore assigned the batch number to a "
        "mirrored variable at every step (~0.13 ms of CPU); `StrataBackup` now assigns it only "
        "while a save is under way. By hand with the backups, before: "
        f"{_ratio_of(results, 'launch_ab_mwm_before', mwm, 'hand+backups')}, CPU per step "
        f"{_cpu_ratio_of(results, 'launch_ab_mwm_before', mwm, 'hand+backups')}; after: "
        f"{_ratio_of(results, 'launch_ab_mwm_after', mwm, 'hand+backups')}, "
        f"{_cpu_ratio_of(results, 'launch_ab_mwm_after', mwm, 'hand+backups')} (6 rounds "
        "each): within these runs' noise. What the backups still cost with two workers "
        "(3-4% of their CPU per step) is not found: one worker in one process shows at most "
        "0.05 ms per step from them, once its fit's start and end are left out.",
        "- **A session per task: the cost, removed.** Where the kernel has autogroups "
        "(`kernel.sched_autogroup_enabled=1`, as on this host; many distributions' kernels "
        "enable it) every session is a CPU scheduling group, and CFS shares the CPU "
        "between groups first: four tasks in four groups get a quarter each whatever their "
        "threads need, where in one group their threads compete as equals. A session per "
        f"task cost {_ratio_of(results, 'launch_ab_ps_group', ps, 'hand+session')} "
        "(parameter_server, every round below 1); the agent now gives each task a process "
        "group of its own in the agent's session (for signals, as before), which costs "
        f"{_ratio_of(results, 'launch_ab_aa', ps, 'hand+group')} (parameter_server) and "
        f"{_ratio_of(results, 'launch_ab_aa', mwm, 'hand+group')} (multi_worker_mirrored), "
        "against an A/A of "
        f"{_ratio_of(results, 'launch_ab_aa', ps, 'hand-again')} and "
        f"{_ratio_of(results, 'launch_ab_aa', mwm, 'hand-again')}.",
        "- **The runtime library: cheaper, not free.** Its metric sender sent a batch about "
        "every 100 ms while points kept coming; a training loop's few points a second meant a "
        "websocket round trip in the task and a commit in the server for each. It now waits "
        "~500 ms after a small batch (a flood still goes every ~100 ms). The server's CPU per "
        "step with a job streaming, over the same cluster beside a by-hand run: "
        f"{_server_growth(results, 'launch_ab_parts', ps)} before, "
        f"{_server_growth(results, 'launch_ab_before_reads', ps)} after (parameter_server); "
        f"{_server_growth(results, 'launch_ab_parts', mwm)} and "
        f"{_server_growth(results, 'launch_ab_before_reads', mwm)} (multi_worker_mirrored). "
        "By hand with "
        "the runtime library, before: "
        f"{_ratio_of(results, 'launch_ab_parts', ps, runtime)} (parameter_server), "
        f"{_ratio_of(results, 'launch_ab_parts', mwm, runtime)} (multi_worker_mirrored); "
        f"after: {_ratio_of(results, 'launch_ab_before_reads', ps, runtime)} and "
        f"{_ratio_of(results, 'launch_ab_before_reads', mwm, runtime)}.",
        "- **Within the noise, left as they are**: the agent's environment "
        f"({_ratio_of(results, 'launch_ab_knobs', ps, 'hand+env')}), TF_GRPC_DEFAULT_OPTIONS "
        f"({_ratio_of(results, 'launch_ab_knobs', ps, 'hand+grpc-options')}), its pipes "
        f"({_ratio_of(results, 'launch_ab_knobs', ps, 'hand+pipes')}), the agent's scheduling "
        f"({_ratio_of(results, 'launch_ab_knobs', ps, 'hand+agent-sched')}), the runtime's "
        "server entry point for workers and ps "
        f"({_ratio_of(results, 'launch_ab_knobs', ps, 'hand+server-entry')}), a cgroup per task "
        f"({_ratio_of(results, 'launch_ab_knobs', ps, 'hand+cgroup')} in 3 rounds; again in 6: "
        f"{_ratio_of(results, 'launch_ab_cgroup', ps, 'hand+cgroup')}, without the memory "
        "controller's cgroup, which charges every page a task maps, "
        f"{_ratio_of(results, 'launch_ab_cgroup', ps, 'hand+cgroup-no-memory')}, against an A/A "
        f"of {_ratio_of(results, 'launch_ab_cgroup', ps, 'hand-again')}: on this host it holds "
        "no CPU controller), all parameter_server.",
        "- **Tried, not adopted**: the intra-op pool at the task's share of the host's cores "
        f"({_ratio_of(results, 'launch_ab_threads', ps, 'hand+threads')} parameter_server, "
        f"{_ratio_of(results, 'launch_ab_threads', mwm, 'hand+threads')} "
        "multi_worker_mirrored): no gain here, so TensorFlow keeps its default. The inter-op "
        "pool at one thread hung the parameter_server job (its remote functions wait on each "
        "other), so that is never set.",
        "- **A warm start: no cost of its own.** A task started by hand in a warm process "
        "(TensorFlow imported before its task came, at idle priority, then handed the task "
        "over its socket, as the agent does) trains at "
        f"{_ratio_of(results, 'launch_ab_warm', ps, 'hand+warm')} of a cold one by hand "
        f"({_ratio_of(results, 'launch_ab_warm', ps, 'hand+warm-busy-import')} with the "
        "import at normal priority), its tasks' CPU per step within 3%; in the same run "
        f"Strata cold made {_ratio_of(results, 'launch_ab_warm', ps, 'strata')} and Strata "
        f"warm {_ratio_of(results, 'launch_ab_warm', ps, 'strata-warm')} (parameter_server, "
        "5 rounds). The main run's warm-slower-than-cold gap does not come back: at this "
        "noise a few per cent between two Strata variants is not a finding.",
        "- **The ways together, by hand, make the gap.** Every way of the agent's at once, "
        "started by hand with no agent or job behind it, trains at "
        f"{_ratio_of(results, 'launch_ab_all', ps, 'hand+all')}, where Strata makes "
        f"{_ratio_of(results, 'launch_ab_all', ps, 'strata')} and the A/A "
        f"{_ratio_of(results, 'launch_ab_all', ps, 'hand-again')} (parameter_server, 8 rounds; "
        "the chief's and the ps' CPU per step grow 3-6% in both). So the cost is in how the "
        "task is started and what runs in it, not in the agent or the server beside it; and "
        "as no single way costs it alone, two or more of them together do. Taking one way "
        "at a time out of `hand+all` (4 rounds, A/A "
        f"{_ratio_of(results, 'launch_ab_all_less_one', ps, 'hand-again')}): without the "
        "runtime library it trains at "
        f"{_ratio_of(results, 'launch_ab_all_less_one', ps, 'hand+all-runtime')}, its tasks' "
        "CPU per step back to by hand's; without any one other way it stays at "
        f"{_ratio_of(results, 'launch_ab_all_less_one', ps, 'hand+all-env')} (the environment) "
        f"to {_ratio_of(results, 'launch_ab_all_less_one', ps, 'hand+all-server-entry')} (the "
        "server entry point). So the runtime library is the part that costs, beside the "
        "agent's ways, what it does not cost alone: what it does per step there is next.",
        *_still_short(results.get("launch_ab")),
        "",
    ]


def _cpu_growth(entry: dict[str, Any], variant: str) -> str:
    ratios = entry.get(variant, {}).get("cpu_ratio", {})
    return ", ".join(f"{task} {r['median'] - 1:+.1%}" for task, r in ratios.items())


def _still_short(ab: dict[str, Any] | None) -> list[str]:
    """Strata in the main run against by hand, and against by hand with the runtime's copy of
    steps_per_execution alone: what Strata still costs beside what that copy gains."""
    if ab is None:
        return []
    parts = []
    for job, entry in ab["summary"].items():
        for variant in strata_variants(entry):
            ratio = entry[variant]["steps_ratio"]["median"]
            beside = ratio_between(ab, job, variant, "hand+local-reads")
            against = f", ÷ by hand with the copy {ratio_text(beside)}" if beside else ""
            parts.append(
                f"{VARIANTS[variant]} ({job}) {ratio:.3f}{against}, CPU per step "
                f"{_cpu_growth(entry, variant)}"
            )
    return [
        "- **Where it stands** (the main run, ÷ by hand): "
        + "; ".join(parts)
        + ". Against by hand with the same copy, what is left is Strata's own cost: the "
        "runtime library's threads (its sender, the batch-log resolver, the TensorBoard event "
        "files: 0.6-1.3% of the chief's CPU in a profile), its backups' work at epoch ends, "
        "and the server's and agents' work for a streaming job, on the same two cores."
    ]


def ab_section(results: dict[str, dict[str, Any]]) -> list[str]:
    """The section: how the A/B runs, then each run kept, main run first."""
    lines = [
        "## Training steps/s: Strata against by hand, one difference at a time",
        "",
        (
            "`bench/ab.py`: bench/launch.py's digits jobs started by hand, from the benchmark "
            "process (asyncio's `subprocess_exec`, TF_CONFIG written by hand, output to a file), "
            "with none, one or all of the agent's ways of starting a task "
            "(`bench/ab_variants.py`), "
            "and under Strata (`POST /jobs` to a `strata up` with 2 agents, `runtime.callbacks()` "
            "on). Every variant runs beside the same running cluster, so the control plane's idle "
            "work is in all of them; before each run the warm pools are full. Every round runs "
            "every variant once, in an order rotated each round and reversed every other round. "
            "Steps/s: the lead task, first to last epoch end; CPU per step: each process, all its "
            "threads, over that window; ratios are taken round by round against *by hand*, median "
            "[min-max]."
        ),
        "",
        *findings(results),
    ]
    for name, about in EXPERIMENTS:
        ab = results.get(name)
        if ab is None:
            continue
        machine = ab.get("machine", {})
        date = str(machine.get("date", "?"))[:16].replace("T", " ")
        load = machine.get("load_average_at_start", [0.0])[0]
        lines += [
            f"`{name}.json`: {about}. Ran {date} UTC on {machine.get('nproc', '?')} cores, load"
            f" average at start {load:.1f}; {ab.get('seconds', 0) / 60:.0f} min.",
            "",
            *ab_table(ab),
        ]
    return lines
