"""The client-mode section of docs/benchmarks.md, from bench/results/client_mode.json."""

from __future__ import annotations

from typing import Any

from bench.text import spread_text


def client_rows(client: dict[str, Any]) -> list[list[str]]:
    summary, targets = client["summary"], client["targets"]
    connect, ratio = summary["connect_to_first_step_s"], summary["ratio"]
    return [
        [
            "client mode: `runtime.connect` → first step (TensorFlow imported, servers up)",
            spread_text(connect, 2, " s"),
            f"≤ {targets['connect_to_first_step_s']:g} s",
            "yes" if connect["median"] <= targets["connect_to_first_step_s"] else "no",
        ],
        [
            "client mode: steps/s ÷ the same job with its chief on the cluster",
            spread_text(ratio, 3),
            f"≥ {targets['ratio']:g}",
            "yes" if ratio["median"] >= targets["ratio"] else "no",
        ],
    ]


def client_section(client: dict[str, Any]) -> list[str]:
    summary, plan = client["summary"], client["plan"]
    lines = [
        "## Client mode: the coordinator in your own process",
        "",
        "`python -m bench.client_mode`: bench/launch.py's digits parameter_server job (2 "
        "workers, 1 ps), each round once with its chief on the cluster and once with "
        "`coordinator: client`, coordinated by a process of its own on this machine that has "
        "imported TensorFlow already, as a notebook kernel would (bench/client_run.py), in "
        f"alternating order; {len(client['rounds'])} rounds of {plan['epochs']} epochs of "
        f"{plan['steps_per_epoch']} steps. The connect time runs from calling "
        "`runtime.connect` on the running job to the first training step done: the attach, "
        "the strategy's connection to the cluster, building the model and tracing the step.",
        "",
        "| | median [min-max] |",
        "| --- | --- |",
        f"| chief on the cluster, steps/s | {spread_text(summary['chief_steps_per_s'], 1)} |",
        f"| client, steps/s | {spread_text(summary['client_steps_per_s'], 1)} |",
        f"| client ÷ chief, per round | {spread_text(summary['ratio'], 3)} |",
        f"| connect → first step | {spread_text(summary['connect_to_first_step_s'], 2, ' s')} |",
        "",
        "The client process here is not under an agent: it is started by hand, and the "
        "runtime library in it streams to the server as the chief's does.",
        "",
    ]
    return lines
