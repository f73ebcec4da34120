"""The server application: routers, error handlers and lifespan services."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI

from backend import session_hooks
from backend.api import (
    agent_channel,
    audit,
    checkpoints,
    clients,
    code,
    cordons,
    evaluator,
    health,
    hosts,
    jobs,
    metrics,
    prometheus,
    quotas,
    replicas,
    streams,
    sweeps,
    task_channel,
    tasks,
    teams,
    tensorboard,
    tokens,
)
from backend.api.body import BodyLimit
from backend.api.forwarding import LeaderForwarding, forwarder
from backend.api.ui import mount_dashboard
from backend.auth import TokenKind, TokenRegistry
from backend.cluster.board import ClusterBoard
from backend.cluster.usage import UsageBoard
from backend.code.store import CodeStore
from backend.config import Settings
from backend.db import PublishingSession, create_engine, session_factory
from backend.errors import install_error_handlers
from backend.jobs.cluster_changes import BOARD
from backend.leadership.claim import Claim, claim
from backend.migrate import upgrade_database
from backend.monitoring.instruments import ServerMetrics
from backend.monitoring.scrape import Scraper
from backend.scheduling.agent_reports import AgentReports
from backend.scheduling.controller import Controller
from backend.scheduling.executors import Executors
from backend.scheduling.hub import AgentHub
from backend.scheduling.intake import JobIntake
from backend.scheduling.native import NativeAgents
from backend.scheduling.runtime_links import RuntimeLinks
from backend.scheduling.sweep_runner import SweepRunner
from backend.shutdown import close_within, stop_services
from backend.slurm.executor import SlurmExecutor
from backend.slurm.reconcile import SlurmSync
from backend.streams.broker import Broker, job_topic
from backend.streams.history import log_frame
from backend.streams.ingest import Ingestor
from backend.streams.logs import LogStore
from backend.streams.progress import ProgressBoard
from backend.streams.publishing import BROKER
from backend.streams.throughput import ThroughputBoard
from backend.tensorboard.processes import TensorBoards

log = logging.getLogger(__name__)


class RedactTokens(logging.Filter):
    """Keep tokens out of logs: browsers put them in websocket query strings."""

    _pattern = re.compile(r"(token=)[^&\s\"']+", re.IGNORECASE)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.args = tuple(
                self._pattern.sub(r"\1<redacted>", a) if isinstance(a, str) else a
                for a in (record.args if isinstance(record.args, tuple) else (record.args,))
            )
        if isinstance(record.msg, str):
            record.msg = self._pattern.sub(r"\1<redacted>", record.msg)
        return True


def _led(app: FastAPI, leading: bool) -> None:
    """This replica began to lead: agents reconnect to it from now (a lost host's grace counts
    from here), and it passes now rather than at the next period."""
    if leading:
        app.state.controller.view.term_began()
        app.state.controller.wake()
        slurm = getattr(app.state, "slurm", None)
        if slurm is not None:
            slurm.wake()


def _superseded(app: FastAPI, why: str) -> None:
    """Another replica led after this one: what this one holds in memory of its term is
    stale, so the server stops, for its supervisor to start it again as a follower."""
    stop = getattr(app.state, "stop_superseded", None)
    if stop is not None:
        log.warning("stopping: superseded (%s); start again to follow", why)
        stop(why)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # Refused here, before migrating, when another server holds this SQLite file or data
        # dir (backend.leadership.replica).
        claimed = app.state.claim = claim(settings.data_dir, settings.resolved_database_url)
        app.state.started_at = datetime.now(UTC)
        try:
            async with _serving(app, claimed):
                yield
        finally:
            claimed.release_locks()

    @asynccontextmanager
    async def _serving(app: FastAPI, claimed: Claim) -> AsyncIterator[None]:
        session_hooks.install()
        engine = create_engine(settings.resolved_database_url)
        await upgrade_database(engine)
        # Whether this replica leads: only the leader passes (backend.leadership).
        lease = app.state.lease = await claimed.lead(
            engine, settings.leader_lease_seconds, settings.replica_url
        )
        monitor.live.leader = lambda: lease.is_leader
        monitor.live.leadership_changes = lambda: lease.changes
        broker = app.state.broker = Broker()
        app.state.engine = engine
        # The cluster view, kept in memory and told which hosts each transaction changed.
        app.state.cluster_board = board = ClusterBoard()
        app.state.sessions = session_factory(
            engine, sync_session_class=PublishingSession, info={BROKER: broker, BOARD: board}
        )
        app.state.hub = AgentHub()
        app.state.forwarding = forwarder(settings.tls_certfile)
        app.state.runtimes = RuntimeLinks()
        app.state.ingestor = Ingestor(app.state.sessions, broker)
        monitor.live.points_ingested = lambda: app.state.ingestor.points_written
        monitor.live.stream_subscribers = broker.streams.total
        # What agents last sampled of their GPUs and tasks (the heartbeats' usage).
        app.state.usage = UsageBoard(broker, app.state.sessions)
        # Where each running job's training is (runtimes' progress reports, in memory).
        app.state.progress = ProgressBoard()
        # How fast each parameter_server worker works (the chief's counters), for stragglers.
        app.state.throughput = ThroughputBoard(settings.straggler_window_seconds)

        def publish_log(job_id: int, task: str, attempt: int, first: int, lines: list[str]) -> None:
            broker.publish(job_topic(job_id), log_frame(task, attempt, first, lines))

        # Log lines are written by the agent channel and read by the routes and streams.
        app.state.logs = LogStore(
            settings.shared / "logs", settings.log_bytes_per_task, publish_log
        )
        # Tasks run on agents reached through the hub: native hosts, and those started in a
        # Slurm job's allocation. Each job's executor says which may take it; the Slurm one
        # is there with Slurm off too, so that a job asking for Slurm never runs elsewhere.
        # The controller sees only the Executors; agents' reports reach it via AgentReports.
        agents = NativeAgents(settings=settings, tokens=app.state.tokens, hub=app.state.hub)
        executors = Executors(agents=agents, others=[SlurmExecutor()])
        app.state.controller = Controller(
            settings=settings,
            sessions=app.state.sessions,
            executors=executors,
            links=app.state.runtimes,
            monitor=monitor,
            progress=app.state.progress,
            throughput=app.state.throughput,
            cpu=app.state.usage.cpu_percent,
            lease=lease,
        )
        monitor.live.stragglers = app.state.controller.stragglers.flagged
        app.state.agent_reports = AgentReports(controller=app.state.controller, hub=app.state.hub)
        # Submissions waiting for the controller are written together (backend.scheduling.intake).
        app.state.intake = JobIntake(
            apply=functools.partial(app.state.controller.apply, frees_or_takes_capacity=False)
        )
        # TensorBoards started on demand for jobs, stopped when idle (backend.tensorboard).
        app.state.tensorboards = TensorBoards(
            limit=settings.tensorboard_max,
            idle_seconds=settings.tensorboard_idle_seconds,
            start_seconds=settings.tensorboard_start_seconds,
            log_dir=settings.shared / "tensorboard",
        )
        # Sweeps' trials, asked of Optuna and run as jobs (backend.scheduling.sweep_runner).
        app.state.sweeps = SweepRunner(
            sessions=app.state.sessions,
            apply=app.state.controller.apply,
            database_url=settings.resolved_database_url,
            leading=lambda: lease.is_leader,
            poll_seconds=settings.sweep_poll_seconds,
        )
        app.state.ingestor.on_stored = app.state.sweeps.points_stored
        log.info("database ready (%s)", engine.dialect.name)
        background = [
            asyncio.create_task(app.state.controller.run(), name="controller"),
            asyncio.create_task(app.state.ingestor.run(), name="ingestor"),
            asyncio.create_task(app.state.tensorboards.run(), name="tensorboards"),
            asyncio.create_task(board.run(app.state.sessions, app.state.usage), name="board"),
            asyncio.create_task(app.state.sweeps.run(), name="sweeps"),
        ]
        # Only the leader passes (the controller and Slurm loops ask the lease before each
        # pass); followers forward what reaches them (backend.api.forwarding).
        if claimed.keeper is not None:
            claimed.keeper.tell(
                on_change=lambda leading: _led(app, leading),
                on_superseded=lambda why: _superseded(app, why),
            )
            claimed.keeper.start_renewing()
        # Jobs that ask for Slurm (spec.slurm) run as Slurm jobs: docs/slurm.md.
        app.state.slurm = None
        if settings.slurm_enabled:
            app.state.slurm = SlurmSync(
                settings=settings,
                sessions=app.state.sessions,
                tokens=app.state.tokens,
                apply=app.state.controller.apply,
                leading=lambda: lease.is_leader,
            )
            background.append(asyncio.create_task(app.state.slurm.run(), name="slurm"))
        try:
            yield
        finally:
            # Bounded (backend.shutdown): a service or a close that never ends is logged and
            # left behind, rather than keeping the server from exiting.
            await stop_services(background, settings.shutdown_seconds)
            for what, close in (
                ("the leader's lease", claimed.release_lease),
                ("interruptions in flight", app.state.controller.interrupter.close),
                ("agent connections", app.state.hub.close_all),
                ("forwarding to the leader", app.state.forwarding.aclose),
                ("TensorBoards", app.state.tensorboards.close),
                ("the database engine", engine.dispose),
            ):
                await close_within(what, close, settings.shutdown_seconds)

    app = FastAPI(
        title="Strata",
        summary="Control plane for distributed TensorFlow training.",
        version="0.1.0",
        lifespan=lifespan,
        # One schema per model: request and response share JobSpec in the OpenAPI document.
        separate_input_output_schemas=False,
    )
    app.state.settings = settings
    # One registry per app: tests run several apps in one process.
    monitor = app.state.monitor = ServerMetrics()
    app.state.scraper = Scraper(monitor)
    app.state.tokens = TokenRegistry(
        {TokenKind.admin: settings.api_token, TokenKind.agent: settings.agent_token}
    )
    install_error_handlers(app)
    app.state.code = CodeStore(settings.shared / "code", settings.max_code_bytes)
    # On a follower, what only the leader may answer goes there (inside the body limit).
    app.add_middleware(
        LeaderForwarding,
        lease=lambda: getattr(app.state, "lease", None),
        forwarding=lambda: app.state.forwarding,
        wait_seconds=2 * settings.leader_lease_seconds,
    )
    # Every HTTP body, and code bundles by their own limit.
    app.add_middleware(
        BodyLimit,
        limit=settings.max_request_bytes,
        larger=(("PUT", "/code/", settings.max_code_bytes),),
    )
    for router in (
        health.router,
        jobs.router,
        tasks.router,
        checkpoints.router,
        clients.router,
        code.router,
        evaluator.router,
        metrics.router,
        prometheus.router,
        hosts.router,
        cordons.router,
        agent_channel.router,
        task_channel.router,
        streams.router,
        tensorboard.router,
        tokens.router,
        teams.router,
        audit.router,
        quotas.router,
        replicas.router,
        sweeps.router,
    ):
        app.include_router(router)
    streams.document_frames(app)  # websocket frames are no route: put them in the schema
    mount_dashboard(app, settings.dashboard_dir)
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(RedactTokens())
    return app
