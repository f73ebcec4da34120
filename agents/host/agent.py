"""The agent daemon: discovers devices, keeps the channel up, runs what the server asks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from agents.environment import TaskEnvironment
from agents.host.bundles import DEFAULT_CACHE_BYTES, BundleCache, http_fetcher
from agents.host.channel import Channel
from agents.host.containers import DockerEngine
from agents.host.containment import Containments, namespace_for
from agents.host.devices import discover
from agents.host.health import DEFAULT_MIN_FREE, FreeSpaceLimit, HealthMonitor, HostProbes
from agents.host.identity import StateDirLock, default_state_dir, load_or_create_identity
from agents.host.ports import PortClaim, default_port_count
from agents.host.supervisor import Supervisor
from agents.host.usage import GpuSampler, UsageSampler
from agents.host.warm_pool import WarmPool, default_memory_budget, default_size
from agents.protocol import Device, Heartbeat, Hello, Leaving, StartTask

log = logging.getLogger(__name__)

AGENT_VERSION = "0.1.0"
# The variable naming where an attempt writes its checkpoints.
CHECKPOINT_DIR = TaskEnvironment.model_fields["checkpoint_dir"].alias or ""
# Under the workspace: the code bundles this agent's attempts run in.
BUNDLE_CACHE_DIR = ".strata-bundles"


@dataclass(frozen=True)
class AgentConfig:
    server_url: str
    token: str
    name: str
    address: str
    port_range: tuple[int, int]  # where its ports are claimed (see agents/host/ports.py)
    workspace: Path
    gpus: int | None = None  # simulated devices; None asks NVML
    stop_grace_seconds: float = 10.0
    # After SIGTERM, how long the server may take to checkpoint and move this host's tasks
    # (see Leaving) before the agent stops what is left itself.
    notice_seconds: float = 20.0
    ca_file: str | None = None  # trusted for an https:// server, by the agent and its tasks
    state_dir: Path | None = None  # its identity and lock; None: default_state_dir(name)
    bundle_cache_bytes: int = DEFAULT_CACHE_BYTES  # unpacked code bundles kept (LRU)
    containers: bool = True  # run environment.image tasks if a Docker engine answers
    warm_pool: int | None = None  # idle warm processes kept; None: one per GPU plus one
    warm_pool_memory: int | None = None  # bytes they may hold; None: a quarter of the host's
    ports: int | None = None  # how many to claim; None: default_port_count(GPUs)
    port_lock_dir: Path | None = None  # machine-wide; None: default_lock_dir()
    # Below this much free space under the workspace or a checkpoint dir, the host is faulty.
    min_free_disk: FreeSpaceLimit = DEFAULT_MIN_FREE


def default_address(server_url: str) -> str:
    """Loopback for a server on this machine; otherwise this host's name."""
    host = urlparse(server_url).hostname or ""
    return "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else socket.gethostname()


def parse_port_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    if not sep or not low.isdigit() or not high.isdigit():
        raise ValueError(f"port range {text!r} must look like 20000-20999")
    first, last = int(low), int(high)
    if not 1024 <= first <= last <= 65535:
        raise ValueError(f"port range {text!r} must lie within 1024-65535, low to high")
    return first, last


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.state_dir = config.state_dir or default_state_dir(config.name)
        self.identity = load_or_create_identity(self.state_dir)  # StateDirError if it cannot
        self._state_lock = StateDirLock(self.state_dir)
        self._state_lock.acquire()  # held until the process exits
        self.devices: list[Device] = discover(config.gpus)
        # Held for the agent's life: the only ports it offers (NoFreePorts if none is free).
        self.ports = PortClaim.claim(
            config.port_range,
            default_port_count(len(self.devices)) if config.ports is None else config.ports,
            config.port_lock_dir,
        )
        # Keyed by the identity too: a second agent started on this host under the same name
        # (refused by the server, but only once it has said hello) must not take the first
        # one's attempts for its own leftovers and end them at start.
        self.namespace = namespace_for(f"{self.identity[:12]}.{config.name}", config.server_url)
        self.containments = Containments.probe(self.namespace)
        # The container engine for environment.image, when this host has one that answers.
        self.engine = DockerEngine.connect() if config.containers else None
        self.engine_info = self.engine.info() if self.engine is not None else None
        self.warm_pool = WarmPool(
            default_size(len(self.devices)) if config.warm_pool is None else config.warm_pool,
            config.warm_pool_memory or default_memory_budget(),
        )
        self.supervisor = Supervisor(
            config.workspace,
            config.server_url,
            self._send,
            ca_file=config.ca_file,
            containments=self.containments,
            bundles=BundleCache(
                config.workspace / BUNDLE_CACHE_DIR,
                http_fetcher(config.server_url, config.token, config.ca_file),
                max_bytes=config.bundle_cache_bytes,
            ),
            engine=self.engine,
            agent_label=self.namespace,
            nvidia=self.engine_info.nvidia if self.engine_info is not None else False,
            warm_pool=self.warm_pool,
            own_stops_only=config.notice_seconds > 0,
        )
        # Sent with a heartbeat every few seconds: GPUs (real ones only) and task processes.
        self.usage = UsageSampler(self.supervisor.attempts, GpuSampler.open(self.devices))
        # So is what the health probes found, probed on a thread of their own.
        self.probes = HostProbes.open(config.workspace, config.min_free_disk, self.devices)
        self.health = HealthMonitor(self.probes.run)
        self.channel = Channel(
            config.server_url,
            config.token,
            hello=self._hello,
            on_start=self._start,
            on_stop=self.supervisor.stop,
            flush_logs=self.supervisor.flush_logs,
            heartbeat=lambda: Heartbeat(
                running=self.supervisor.running(),
                usage=self.usage.due(),
                health=self.health.due(),
            ),
            on_logs_ack=lambda ack: self.supervisor.logs_acked(ack.key, ack.next_line),
            on_connected=self.supervisor.reconnected,
            ca_file=config.ca_file,
            on_collect_stacks=self.supervisor.collect_stacks,
        )

    async def _start(self, message: StartTask) -> None:
        checkpoints = message.env.get(CHECKPOINT_DIR)
        if checkpoints:
            self.probes.watch_checkpoints(checkpoints)  # its free space is watched from now on
        await self.supervisor.start(message)

    def _send(self, message: object) -> bool:
        return self.channel.send(message)  # type: ignore[arg-type]

    def _hello(self) -> Hello:
        return Hello(
            name=self.config.name,
            identity=self.identity,
            address=self.config.address,
            port_range=self.ports.port_range,
            devices=self.devices,
            engine=self.engine_info,
            version=AGENT_VERSION,
            running=self.supervisor.running(),
            finished=self.supervisor.hello_finished(most=50),
        )

    async def _give_notice(self) -> None:
        """Tell the server this host is leaving, and wait (at most the notice) while it
        checkpoints and stops the tasks here: stopped by it, they restart elsewhere as
        interrupted, not failed."""
        notice = self.config.notice_seconds
        if notice <= 0 or not self.supervisor.running():
            return
        if not self._send(Leaving(notice_seconds=notice)):
            return  # not connected: nobody to tell
        log.info("agent %s leaving: %gs for the server to move its tasks", self.config.name, notice)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(notice):
                await self.supervisor.wait_ended()

    async def run(self) -> None:
        """Run until SIGTERM or SIGINT, then stop every task before exiting."""
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            self.supervisor.stopping = True  # at once: exits already on their way say so
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        log.info(
            "agent %s: %d device(s), ports %d-%d (claimed in %d-%d), workspace %s",
            self.config.name,
            len(self.devices),
            *self.ports.port_range,
            *self.config.port_range,
            self.config.workspace,
        )
        log.info("tasks are contained by %s", self.containments.kind)
        for ended in await self.containments.end_leftovers():
            log.warning("ended what was left of %s, which this agent no longer runs", ended)
        if self.engine is not None and self.engine_info is not None:
            log.info("containers run on docker %s", self.engine_info.version)
            for removed in await asyncio.to_thread(self.engine.remove_leftovers, self.namespace):
                log.warning("removed the container of %s, which this agent no longer runs", removed)
        # After the leftovers are gone: a warm process is not an attempt's leftover.
        self.warm_pool.start()
        log.info("warm pool: up to %d warm processes", self.warm_pool.size)
        channel = asyncio.create_task(self.channel.run_forever())
        done, _ = await asyncio.wait(
            [channel, asyncio.create_task(stopping.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        await self._give_notice()
        log.info("agent %s stopping its tasks", self.config.name)
        await self.warm_pool.close()
        await self.supervisor.stop_all(self.config.stop_grace_seconds)
        self.containments.close()
        self.usage.close()
        self.probes.close()
        if self.engine is not None:
            self.engine.close()
        self.supervisor.flush_logs()
        await asyncio.sleep(0.2)  # let the writer send the last exits while it can
        channel.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await channel
        self.ports.close()  # its tasks are gone: another agent may have the ports
        if channel in done and self.channel.refused:
            raise SystemExit(f"refused by the server: {self.channel.refused}")
