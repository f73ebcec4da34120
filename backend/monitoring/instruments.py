"""What the server counts and times as it works, for `/metrics`: one registry per app, so that
several apps in one process (tests) never share a figure.

Counts of jobs, tasks, hosts and GPUs are not kept here: they are read from the database when
scraped (``backend.monitoring.scrape``). What only the running server knows (how long its
passes take, what it refused) is recorded where it happens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# Reconcile passes take milliseconds on a quiet server and seconds at a thousand hosts.
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A job waits from its submission for room on the cluster: seconds to hours.
PLACEMENT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 7200.0)


class LiveFigures(Collector):
    """Figures read from the server's objects when scraped (they keep them anyway)."""

    def __init__(self) -> None:
        self.points_ingested: Callable[[], int] = lambda: 0
        self.stream_subscribers: Callable[[], int] = lambda: 0
        self.stragglers: Callable[[], list[tuple[int, str]]] = list  # (job id, worker) slow now
        self.leader: Callable[[], bool] = lambda: True
        self.leadership_changes: Callable[[], int] = lambda: 0

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield CounterMetricFamily(
            "strata_metric_points_ingested",
            "Metric points from training processes stored (resent points are not counted).",
            value=self.points_ingested(),
        )
        yield GaugeMetricFamily(
            "strata_stream_subscribers",
            "Open live streams (/jobs/{id}/stream and /stream websockets).",
            value=self.stream_subscribers(),
        )
        slow = GaugeMetricFamily(
            "strata_straggler",
            "1 for each parameter_server worker found slow and not back over the line since.",
            labels=["job_id", "task"],
        )
        for job_id, task in self.stragglers():
            slow.add_metric([str(job_id), task], 1)
        yield slow
        yield GaugeMetricFamily(
            "strata_leader",
            "1 while this server replica leads (runs the controller's passes), else 0.",
            value=int(self.leader()),
        )
        yield CounterMetricFamily(
            "strata_leadership_changes",
            "Times this replica began or stopped leading.",
            value=self.leadership_changes(),
        )


class ServerMetrics:
    """The instruments of one server (one app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.reconcile_seconds = Histogram(
            "strata_reconcile_pass_seconds",
            "How long one reconcile pass of the controller took (every reconciler, one "
            "transaction).",
            buckets=PASS_BUCKETS,
            registry=registry,
        )
        self.lock_held_seconds = Counter(
            "strata_controller_lock_held_seconds",
            "Seconds the controller's lock was held (every change to jobs and tasks takes it), "
            "by what held it: pass (reconcile passes), request (API changes), agent (agents' "
            "hellos and exits). Near one second a second, changes queue for it.",
            ["by"],
            registry=registry,
        )
        self.placement_seconds = Histogram(
            "strata_placement_latency_seconds",
            "From a job's submission to the placement of all its tasks (its first placement).",
            buckets=PLACEMENT_BUCKETS,
            registry=registry,
        )
        self.restarts = Counter(
            "strata_restarts",
            "Restarts decided, by cause: task_failed (an exit code), task_killed (a signal, or "
            "128+N), over_memory_limit, start_failed, host_lost, requested.",
            ["cause"],
            registry=registry,
        )
        self.interruptions = Counter(
            "strata_interruptions",
            "Jobs interrupted on purpose (their tasks stop, after a checkpoint where one can "
            "be taken), by cause: suspend, preemption, notice (an agent leaving), "
            "allocation_ended (a Slurm allocation's agents stopping: a requeue), stop_signal (a "
            "task that saved on a SIGTERM from outside Strata).",
            ["cause"],
            registry=registry,
        )
        self.straggler_findings = Counter(
            "strata_straggler_findings",
            "Workers newly found slow (under the median of their job's workers / 1.5), by "
            "action: reported, or moved (to another host, stragglers: restart).",
            ["action"],
            registry=registry,
        )
        self.websocket_refusals = Counter(
            "strata_websocket_refusals",
            "Websockets the server closed on a peer that broke a rule, by channel (agent, "
            "task, stream) and reason.",
            ["channel", "reason"],
            registry=registry,
        )
        self.live = LiveFigures()
        registry.register(self.live)

    def refused(self, path: str, reason: str) -> None:
        self.websocket_refusals.labels(channel=channel_of(path), reason=reason).inc()


def channel_of(path: str) -> str:
    """The websocket channel a request path belongs to."""
    if path == "/agents/connect":
        return "agent"
    if path == "/tasks/connect":
        return "task"
    return "stream"
