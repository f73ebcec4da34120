"""The tasks this agent runs: starting, stopping, watching, and remembering how they ended."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agents.host import stacks
from agents.host.bundles import BundleCache, BundleError
from agents.host.container_task import ContainerTask
from agents.host.containers import DockerEngine
from agents.host.containment import Containments, reap_orphans
from agents.host.launcher import LaunchError, TaskProcess
from agents.host.warm_eligibility import warm_start_refusal
from agents.host.warm_pool import WarmPool
from agents.protocol import (
    MAX_LOG_BATCH,
    MAX_LOG_BATCH_CHARS,
    MAX_LOG_LINE,
    AgentMessage,
    CollectStacks,
    RunningTask,
    StartTask,
    StopTask,
    TaskExit,
    TaskExited,
    TaskKey,
    TaskLogs,
    TaskStarted,
    Welcome,
)

log = logging.getLogger(__name__)

Attempt = TaskProcess | ContainerTask
FINISHED_KEPT = 200  # exits remembered for the next hello, in case the channel was down
LOG_BUFFER_LINES = 20_000  # per task while the server is unreachable; older lines are dropped


@dataclass
class LogBuffer:
    """Lines not yet acknowledged by the server, numbered so it can drop duplicates and see gaps.

    Lines are forgotten only when the server acknowledges them; after a reconnect the
    unacknowledged ones are sent again.
    """

    first_line: int = 0  # number of lines[0], the oldest unacknowledged line
    lines: list[str] = field(default_factory=list)
    in_flight: int = 0  # lines[:in_flight] were sent and await their acknowledgement

    def add(self, lines: list[str]) -> None:
        self.lines.extend(lines)
        overflow = len(self.lines) - LOG_BUFFER_LINES
        if overflow > 0:
            del self.lines[:overflow]
            self.first_line += overflow
            self.in_flight = max(0, self.in_flight - overflow)

    def unsent(self) -> tuple[int, list[str]]:
        """The next batch to send: at most MAX_LOG_BATCH lines and, past its first line, at
        most MAX_LOG_BATCH_CHARS characters, so that long lines cannot outgrow a frame."""
        batch = self.lines[self.in_flight : self.in_flight + MAX_LOG_BATCH]
        chars = 0
        for count, line in enumerate(batch):
            chars += len(line)
            if count > 0 and chars > MAX_LOG_BATCH_CHARS:
                batch = batch[:count]
                break
        return self.first_line + self.in_flight, batch

    def sent(self, count: int) -> None:
        self.in_flight += count

    def acked(self, next_line: int) -> None:
        done = min(len(self.lines), next_line - self.first_line)
        if done > 0:
            del self.lines[:done]
            self.first_line += done
            self.in_flight = max(0, self.in_flight - done)

    def resend(self) -> None:
        self.in_flight = 0


class Supervisor:
    def __init__(
        self,
        workspace: Path,
        server_url: str,
        send: Callable[[AgentMessage], bool],
        ca_file: str | None = None,
        containments: Containments | None = None,
        bundles: BundleCache | None = None,
        engine: DockerEngine | None = None,
        agent_label: str = "",
        nvidia: bool = False,
        warm_pool: WarmPool | None = None,
        own_stops_only: bool = False,
    ) -> None:
        self.workspace = workspace
        # The agent gives notice when told to stop: its tasks hold a SIGTERM it did not send.
        self.own_stops_only = own_stops_only
        self.warm_pool = warm_pool  # None: every attempt starts cold
        # Where environment.image attempts run; None: they fail with the reason.
        self.engine = engine
        self.agent_label = agent_label  # on this agent's containers, to find its leftovers
        self.nvidia = nvidia
        self.bundles = bundles  # None: starts that name a code bundle fail
        # None: each attempt is its process tree, process group and marker (no cgroups, no probe)
        self.containments = containments
        self.server_url = server_url
        self.ca_file = ca_file
        self._send = send
        self._tasks: dict[TaskKey, Attempt] = {}
        self._bundle_of: dict[TaskKey, str | None] = {}  # the code bundle each attempt holds
        self._watchers: set[asyncio.Task[None]] = set()
        self._spawning = 0  # starts under way: their main pids are not known yet
        self._logs: dict[TaskKey, LogBuffer] = {}
        self.finished: OrderedDict[TaskKey, TaskExit] = OrderedDict()
        # Exits that could not be sent since the last hello was made (the channel was down).
        self._unsent_exits: list[TaskExit] = []
        # Where task output lines are cut: the server's limit, from its last welcome.
        self.line_limit = MAX_LOG_LINE
        # Set as the agent is told to stop: every exit from then on says so, whether the
        # agent stopped the attempt or the same signal reached it first (Slurm signals
        # every process of the allocation's step).
        self.stopping = False

    def running(self) -> list[RunningTask]:
        return [RunningTask(key=k, pid=t.pid) for k, t in self._tasks.items()]

    def attempts(self) -> dict[TaskKey, Attempt]:
        """The attempts running now, for agents.host.usage to sample."""
        return dict(self._tasks)

    async def start(self, command: StartTask) -> None:
        key = command.key
        if key in self._tasks or key in self.finished:
            return  # a resent start: this attempt already runs, or already ran
        if self.stopping:
            # Nothing started now would be stopped: the server learns of the agent's end from
            # its exits and its lost host.
            log.info("not starting %s of job %s: the agent is stopping", key.task, key.job_id)
            return
        self._logs[key] = LogBuffer()
        try:
            process = self._attempt(command)
        except (OSError, LaunchError) as exc:
            log.warning("cannot start %s of job %s: %s", key.task, key.job_id, exc)
            self._finish(TaskExit(key=key, exit_code=None, error=str(exc)))
            return
        self._spawning += 1
        bundle = command.code_sha256
        try:
            root = await self._code_root(bundle)
            try:
                cold_reason = await self._launch(process, command, root)
            except LaunchError:
                self._release(bundle)
                raise
        except LaunchError as exc:
            log.warning("cannot start %s of job %s: %s", key.task, key.job_id, exc)
            await process.abandon()  # nothing runs there: remove its cgroups or container
            self._finish(TaskExit(key=key, exit_code=None, error=str(exc)))
            return
        finally:
            self._spawning -= 1
        self._bundle_of[key] = bundle
        self._tasks[key] = process
        log.info(
            "started %s of job %s (attempt %s, pid %s)",
            key.task,
            key.job_id,
            key.attempt,
            process.pid,
        )
        self._send(
            TaskStarted(
                key=key,
                pid=process.pid,
                warm=cold_reason is None,
                cold_reason=None if cold_reason is None else cold_reason[:512],
            )
        )
        watcher = asyncio.create_task(self._watch(process))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _launch(self, process: Attempt, command: StartTask, root: Path) -> str | None:
        """Start the attempt in a warm process where it can be the same as a cold start, else
        cold; why it started cold (None: it started warm)."""
        reason = warm_start_refusal(command)
        if reason is None and not isinstance(process, TaskProcess):
            reason = "the job runs in its own environment"
        if reason is None and (self.warm_pool is None or self.warm_pool.size == 0):
            reason = "this agent keeps no warm processes"
        if reason is None and isinstance(process, TaskProcess) and self.warm_pool is not None:
            cwd, env = process.prepare(command, root, self.server_url, self.ca_file)
            reason = self.warm_pool.refusal(command.argv, cwd, env)
            warm = self.warm_pool.take() if reason is None else None
            if reason is None and warm is None:
                reason = "no warm process was ready"
            if warm is not None:
                try:
                    await process.adopt(warm, command, cwd, env)
                    return None
                except LaunchError as exc:
                    reason = str(exc)
        await process.spawn(command, root, self.server_url, ca_file=self.ca_file)
        return reason

    def _attempt(self, command: StartTask) -> Attempt:
        """A container for environment.image, else processes in their containment."""
        image = command.environment.image if command.environment else None
        if image is not None:
            if self.engine is None:
                raise LaunchError(f"this host has no container engine to run image {image!r}")
            return ContainerTask(
                command.key,
                self._collect_lines,
                self.engine,
                self.agent_label,
                nvidia=self.nvidia,
                line_limit=self.line_limit,
            )
        try:
            containment = self.containments.create(command.key) if self.containments else None
        except OSError as exc:
            raise LaunchError(f"cannot contain the task: {exc}") from exc
        return TaskProcess(
            command.key,
            self._collect_lines,
            containment,
            self.line_limit,
            own_stops_only=self.own_stops_only,
        )

    async def _code_root(self, bundle: str | None) -> Path:
        """Where the attempt's working_dir is resolved: its code bundle, or the workspace."""
        if bundle is None:
            return self.workspace
        if self.bundles is None:
            raise BundleError(f"this agent has no code bundle cache for bundle {bundle}")
        return await self.bundles.acquire(bundle)

    def _release(self, bundle: str | None) -> None:
        if bundle is not None and self.bundles is not None:
            self.bundles.release(bundle)

    async def stop(self, command: StopTask) -> None:
        process = self._tasks.get(command.key)
        if process is not None and process.stop_requested:
            # The server sends a stop again while the task still runs (a lost command, it
            # assumes); a second SIGTERM would cut short the grace the first one gave, in
            # which a sidecar evaluator evaluates the final checkpoint.
            log.info("%s of job %s is stopping already", command.key.task, command.key.job_id)
            return
        if process is not None:
            log.info(
                "stopping %s of job %s: %s", command.key.task, command.key.job_id, command.reason
            )
            await process.stop(command.grace_seconds)

    def collect_stacks(self, command: CollectStacks) -> None:
        """Writes the threads (and, through the runtime, the Python stacks) of these attempts'
        processes into their logs; a container's processes are not ours to read."""
        for key in command.keys:
            process = self._tasks.get(key)
            if not isinstance(process, TaskProcess) or process.stop_requested:
                continue
            pids = process.containment.procs() or {process.pid}
            label = f"{key.task} attempt {key.attempt}"
            stacks.collect(label, pids, process.output.emit, reason=command.reason)
        self.flush_logs()

    async def wait_ended(self) -> None:
        """Until every attempt running now has ended (stopped by the server)."""
        if self._watchers:
            await asyncio.wait(list(self._watchers))

    async def stop_all(self, grace: float) -> None:
        await asyncio.gather(*(p.stop(grace) for p in list(self._tasks.values())))
        await asyncio.gather(*list(self._watchers), return_exceptions=True)

    async def _watch(self, process: Attempt) -> None:
        exit = await process.wait()
        del self._tasks[process.key]
        self._release(self._bundle_of.pop(process.key, None))
        log.info(
            "%s of job %s exited: code %s", process.key.task, process.key.job_id, exit.exit_code
        )
        self._finish(exit)
        if self.containments is not None and self.containments.subreaper and not self._spawning:
            keep = {task.pid for task in self._tasks.values()}
            reap_orphans(keep=keep | (self.warm_pool.pids() if self.warm_pool else set()))

    def _finish(self, exit: TaskExit) -> None:
        if self.stopping:
            exit = exit.model_copy(update={"agent_stopping": True})
        self.flush_logs(exit.key)  # the last lines travel before the exit
        self.finished[exit.key] = exit
        while len(self.finished) > FINISHED_KEPT:
            self.finished.popitem(last=False)
        if not self._send(TaskExited(exit=exit)):
            self._unsent_exits.append(exit)

    def hello_finished(self, most: int) -> list[TaskExit]:
        """The latest exits, for a hello: those the channel could not send are among them."""
        self._unsent_exits = []
        return list(self.finished.values())[-most:]

    def _collect_lines(self, key: TaskKey, lines: list[str]) -> None:
        self._logs.setdefault(key, LogBuffer()).add(lines)

    def flush_logs(self, only: TaskKey | None = None) -> None:
        """Send lines not sent yet; what cannot be sent now stays buffered for the next try."""
        for key, buffer in list(self._logs.items()):
            if only is not None and key != only:
                continue
            while True:
                first, batch = buffer.unsent()
                if not batch or not self._send(TaskLogs(key=key, first_line=first, lines=batch)):
                    break
                buffer.sent(len(batch))

    def logs_acked(self, key: TaskKey, next_line: int) -> None:
        buffer = self._logs.get(key)
        if buffer is None:
            return
        buffer.acked(next_line)
        if not buffer.lines and key not in self._tasks:
            del self._logs[key]  # the attempt is over and all of its output is stored

    def reconnected(self, welcome: Welcome) -> None:
        """A new channel: whatever was in flight on the old one may not have arrived.

        Attempts started from now on cut their lines at the server's limit."""
        self.line_limit = welcome.max_log_line_chars
        for buffer in self._logs.values():
            buffer.resend()
        # An attempt that exited after the hello was made, before this channel could send: its
        # exit is in no hello, and its absence from the next heartbeat would read as vanished.
        unsent, self._unsent_exits = self._unsent_exits, []
        for exit in unsent:
            self._send(TaskExited(exit=exit))
