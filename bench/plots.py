"""PNG plots for docs/benchmarks.md, drawn with matplotlib from bench/results/*.json.

    .venv/bin/python -m bench.plots      (make bench runs it after the benchmarks)

Only for results that exist; matplotlib is the `bench` extra, not a dependency of Strata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.harness import REPO, RESULTS

PLOTS = REPO / "docs" / "bench-plots"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _errors(spreads: list[dict[str, float]]) -> list[list[float]]:
    """matplotlib's asymmetric error bars: distances from the median to min and to max."""
    return [[s["median"] - s["min"] for s in spreads], [s["max"] - s["median"] for s in spreads]]


def recovery_plot(recovery: dict[str, Any], out: Path) -> None:
    import matplotlib.pyplot as plt

    names = list(recovery["scenarios"])
    spreads = [recovery["scenarios"][n]["seconds"] for n in names]
    floor = recovery["tensorflow_import_seconds"]["median"]
    figure, axes = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    axes.bar(names, [s["median"] for s in spreads], yerr=_errors(spreads), capsize=4)
    axes.axhline(floor, color="grey", linestyle="--", label=f"TensorFlow import ({floor:.1f} s)")
    axes.axhline(floor + 1, color="tab:red", linestyle=":", label="worker target (import + 1 s)")
    axes.set_ylabel("kill → training resumed (s)")
    axes.set_title("Recovery, median with min-max")
    axes.legend(loc="upper left", fontsize=8)
    figure.savefig(out, dpi=110)
    plt.close(figure)


def scale_plot(scale: dict[str, Any], out: Path) -> None:
    """How each figure grows with the agent count: solid lines SQLite, dashed PostgreSQL."""
    import matplotlib.pyplot as plt

    measured = [r for r in scale["runs"] if "failed" not in r]
    figure, (latency, placing, memory) = plt.subplots(1, 3, figsize=(14, 4), layout="constrained")
    for database, style in (("sqlite", "-"), ("postgresql", "--")):
        runs = sorted(
            (r for r in measured if r.get("database", "sqlite") == database),
            key=lambda r: r["agents"],
        )
        if not runs:
            continue
        agents = [r["agents"] for r in runs]
        name = "PostgreSQL" if database == "postgresql" else "SQLite"
        for key, label, color in (
            ("get_jobs", "GET /jobs", "tab:blue"),
            ("get_cluster", "GET /cluster", "tab:orange"),
            ("get_job", "GET /jobs/{id}", "tab:purple"),
            ("post_jobs", "POST /jobs", "tab:green"),
        ):
            shown = [(a, r[key]["p99_ms"]) for a, r in zip(agents, runs, strict=True) if key in r]
            if shown:
                latency.plot(
                    *zip(*shown, strict=True),
                    style,
                    marker="o",
                    color=color,
                    label=f"{label} p99, {name}",
                )
        placing.plot(
            agents,
            [r["place_and_start_seconds"] for r in runs],
            style,
            marker="o",
            color="tab:blue",
            label=f"N jobs placed and running (s), {name}",
        )
        placing.plot(
            agents,
            [r["server_cores_heartbeats_only"] for r in runs],
            style,
            marker="s",
            color="tab:orange",
            label=f"server cores on heartbeats, {name}",
        )
        memory.plot(
            agents,
            [r["server_rss_mib"] for r in runs],
            style,
            marker="o",
            color="tab:green",
            label=f"server RSS, {name}",
        )
    latency.axhline(50, color="tab:red", linestyle=":", label="GET /jobs target (50 ms)")
    latency.set_xscale("log")
    latency.set_xlabel("simulated agents")
    latency.set_ylabel("ms")
    latency.legend(fontsize=7)
    latency.set_title("API latency with every agent heartbeating")
    placing.axhline(15, color="tab:red", linestyle=":", label="all running target (15 s)")
    placing.set_xscale("log")
    placing.set_xlabel("simulated agents (N jobs, 10 N tasks)")
    placing.legend(fontsize=7)
    placing.set_title("Placement and heartbeat load")
    memory.axhline(400, color="tab:red", linestyle=":", label="target (400 MiB)")
    memory.set_xscale("log")
    memory.set_xlabel("simulated agents")
    memory.set_ylabel("MiB")
    memory.legend(fontsize=7)
    memory.set_title("Server memory, all jobs running")
    figure.savefig(out, dpi=110)
    plt.close(figure)


def pipeline_plot(pipeline: dict[str, Any], out: Path) -> None:
    import matplotlib.pyplot as plt

    figure, (ingest, latency) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
    databases = [d for d in ("sqlite", "postgresql") if d in pipeline]
    spreads = [pipeline[d]["ingest"]["points_per_s"] for d in databases]
    ingest.bar(databases, [s["median"] for s in spreads], yerr=_errors(spreads), capsize=4)
    target = pipeline["targets"]["ingest_points_per_s"]
    ingest.axhline(target, color="tab:red", linestyle=":", label=f"target ({target:,})")
    ingest.set_ylabel("points/s stored and acked")
    ingest.set_title("Ingest")
    ingest.legend(fontsize=8)
    labels, p50, p99 = [], [], []
    for database in databases:
        for scenario in pipeline[database].get("latency", []):
            labels.append(f"{database}\n{scenario['rate']:,}/s")
            p50.append(scenario["p50_ms"]["median"])
            p99.append(scenario["p99_ms"]["median"])
    positions = range(len(labels))
    latency.bar([p - 0.2 for p in positions], p50, width=0.4, label="p50")
    latency.bar([p + 0.2 for p in positions], p99, width=0.4, label="p99")
    latency.axhline(
        pipeline["targets"]["latency_p99_ms"], color="tab:red", linestyle=":", label="p99 target"
    )
    latency.set_xticks(list(positions), labels, fontsize=8)
    latency.set_ylabel("put() → websocket (ms)")
    latency.set_title("Callback → subscriber latency")
    latency.legend(fontsize=8)
    figure.savefig(out, dpi=110)
    plt.close(figure)


def launch_plot(launch: dict[str, Any], out: Path) -> None:
    """Per job, each variant's launch latency and steps/s side by side."""
    import matplotlib.pyplot as plt

    colours = {
        "strata": "tab:blue",
        "strata_bare": "tab:cyan",
        "hand": "tab:grey",
        "ray": "tab:orange",
    }
    labels = {"strata_bare": "strata, no runtime callbacks"}
    jobs = list(launch["summary"])
    figure, (latency, speed) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
    variants = [v for v in colours if any(v in launch["summary"][j] for j in jobs)]
    width = 0.8 / len(variants)
    for offset, variant in enumerate(variants):
        present = [j for j in jobs if variant in launch["summary"][j]]
        xs = [jobs.index(j) + (offset - (len(variants) - 1) / 2) * width for j in present]
        for axes, key in ((latency, "launch_s"), (speed, "steps_per_s")):
            spreads = [launch["summary"][j][variant][key] for j in present]
            axes.bar(
                xs,
                [s["median"] for s in spreads],
                width,
                yerr=_errors(spreads),
                capsize=3,
                color=colours[variant],
                label=labels.get(variant, variant),
            )
    floor = launch["tensorflow_import_s"]["median"]
    latency.axhline(floor, color="black", linestyle="--", label=f"TF import ({floor:.1f} s)")
    for axes, label in ((latency, "request → first step (s)"), (speed, "steps/s")):
        axes.set_xticks(range(len(jobs)), [j.replace("_", " ") for j in jobs], fontsize=8)
        axes.set_ylabel(label)
    latency.set_title("Launch latency")
    speed.set_title("Training throughput")
    latency.legend(fontsize=8)
    figure.savefig(out, dpi=110)
    plt.close(figure)


def draw() -> list[Path]:
    """Draws every plot whose results exist; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    PLOTS.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in (
        ("recovery", recovery_plot),
        ("scale", scale_plot),
        ("metrics_pipeline", pipeline_plot),
        ("launch", launch_plot),
    ):
        data = _load(name)
        if data is not None:
            out = PLOTS / f"{name}.png"
            plot(data, out)
            written.append(out)
    return written


if __name__ == "__main__":
    for path in draw():
        print(path)
