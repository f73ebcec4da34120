"""The agent channel: one websocket per agent, typed messages both ways."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from agents.protocol import (
    PROTOCOL_VERSION,
    Heartbeat,
    Hello,
    Leaving,
    LogsAck,
    Refused,
    RunningTask,
    TaskExited,
    TaskKey,
    TaskLogs,
    TaskStarted,
    agent_message,
    cut_line,
)
from backend import security
from backend.api.deps import (
    AgentReportsDep,
    HubDep,
    LogStoreDep,
    SettingsDep,
    SlurmDep,
    UsageDep,
    websocket_principal,
)
from backend.api.forwarding import SERVICE_RESTART
from backend.api.frame_limits import POLICY_VIOLATION, FrameLimits, Inbound, close
from backend.auth import TokenKind
from backend.cluster.usage import UsageBoard
from backend.config import Settings
from backend.db import to_the_end
from backend.errors import Unavailable
from backend.hosts.names import NameClash
from backend.leadership.lease import Lease
from backend.scheduling.agent_reports import AgentReports
from backend.scheduling.cluster import StartMode
from backend.scheduling.hub import AgentConnection, NameTaken
from backend.streams.logs import LogStore

router = APIRouter()
log = logging.getLogger(__name__)


def frame_limits(settings: Settings) -> FrameLimits:
    return FrameLimits(
        max_bytes=settings.agent_frame_bytes,
        frames_per_second=settings.agent_frames_per_second,
        burst=settings.agent_frame_burst,
    )


class HelloTwice(Exception):
    """An agent said hello on a channel it had already opened."""


@router.websocket("/agents/connect")
async def agent_channel(
    websocket: WebSocket,
    settings: SettingsDep,
    hub: HubDep,
    reports: AgentReportsDep,
    logs: LogStoreDep,
    usage: UsageDep,
    slurm: SlurmDep,
) -> None:
    await websocket.accept()
    principal = await websocket_principal(websocket)
    # A job agent token always names its job (stored tokens are never of that kind).
    agent = principal is not None and (
        principal.kind is TokenKind.agent
        or (principal.kind is TokenKind.job_agent and principal.job_id is not None)
    )
    if principal is None or not agent:
        await close(
            websocket, POLICY_VIOLATION, "an agent token is required", cause="unauthenticated"
        )
        return
    client = websocket.client
    inbound = Inbound(
        websocket,
        frame_limits(settings),
        f"an agent at {client.host if client else 'an unknown address'}",
    )
    hello = await inbound.first(agent_message, "hello")
    if hello is None:
        return
    if not isinstance(hello, Hello):
        await close(websocket, POLICY_VIOLATION, f"the first frame must be hello, got {hello.type}")
        return
    inbound.peer = f"agent {hello.name}"
    if hello.protocol != PROTOCOL_VERSION:
        await _refuse(inbound, version_mismatch(hello), cause="protocol_version")
        return

    if hello.identity is None:
        await _refuse(
            inbound, "this agent presented no identity (Hello.identity)", cause="no_identity"
        )
        return

    # An agent started in a job's Slurm allocation: its token names the job, and it may join
    # only while that Slurm job runs; only that job's tasks are placed on it.
    bound_job = principal.job_id if principal.kind is TokenKind.job_agent else None
    if bound_job is not None:
        refusal = (
            "this server runs no Slurm backend"
            if slurm is None
            else await to_the_end(slurm.agent_refusal(bound_job, hello.name))
        )
        if refusal is not None:
            security.refused(f"agent {hello.name}", f"a job agent token of job {bound_job}")
            await _refuse(inbound, refusal, cause="job_agent")
            return

    # One name, one host (backend.hosts.names), asked before the attach, at it, and again
    # when the hello is applied.
    if (clash := await to_the_end(reports.admit(hello))) is not None:
        await _refuse(inbound, clash, cause="name_clash")
        return
    # No await from the check above to the attach: two agents saying hello at once under
    # one name cannot both pass (attach raises NameTaken if one somehow did).
    connection = AgentConnection(
        hello.name,
        websocket,
        identity=hello.identity,
        address=client.host if client else hello.address,
        bound_job=bound_job,
    )
    try:
        replaced = hub.attach(connection)
    except NameTaken as taken:  # the checks above should have found it: refused all the same
        await _refuse(inbound, str(taken), cause="name_clash")
        return
    if replaced is not None:
        await replaced.close(1000, "replaced by a newer connection from the same agent")
    engine = hello.engine
    log.info(
        "agent %s joined from %s (%s)",
        hello.name,
        hello.address,
        f"container engine {engine.kind} {engine.version}" if engine else "no container engine",
    )
    try:
        try:
            first = await to_the_end(reports.on_hello(hello))
        except NameClash as clash:  # a hello under this name got in between: it stays
            await _refuse(inbound, str(clash), cause="name_clash")
            return
        for reply in first:
            connection.send(reply)
        connection.welcomed = True
        await _serve(
            inbound,
            reports,
            _LeaderLogs(logs, websocket.app.state.lease),
            usage,
            connection,
            settings.max_log_line_chars,
            _Listed(hello.running),
        )
    except HelloTwice:
        await connection.close(POLICY_VIOLATION, "hello may only be sent once")
    except (NoLongerLeads, Unavailable) as stopped:  # the agent reconnects, to the leader
        await connection.close(SERVICE_RESTART, str(stopped)[:120])
    except WebSocketDisconnect:
        pass
    finally:
        hub.detach(connection)
        await connection.close()
        log.info("agent %s disconnected", hello.name)


def version_mismatch(hello: Hello) -> str:
    # Short enough for a close frame (123 bytes), which is all a client may get to read.
    return (
        f"agent protocol {hello.protocol} is not this server's {PROTOCOL_VERSION}: "
        f"run the same Strata version on agent and server (agent {hello.version[:16]})"
    )


async def _refuse(inbound: Inbound, reason: str, *, cause: str) -> None:
    """`refused` tells the agent to give up rather than reconnect; the close repeats why."""
    log.warning("refusing %s: %s", inbound.peer, reason)
    with contextlib.suppress(Exception):  # it may be gone already: the close says it anyway
        await inbound.websocket.send_text(Refused(reason=reason).model_dump_json())
    await close(inbound.websocket, POLICY_VIOLATION, reason, cause=cause)


class NoLongerLeads(Exception):
    """This replica stopped leading while an agent's frames were being applied."""


class _LeaderLogs:
    """The log store, written only while this replica leads: a leader that was paused wakes
    with frames still unread in its sockets, and must not append them to the shared files
    the new leader writes (its database writes are fenced; files are not)."""

    def __init__(self, logs: LogStore, lease: Lease) -> None:
        self.logs, self.lease = logs, lease

    def append(self, job_id: int, task: str, attempt: int, first: int, lines: list[str]) -> None:
        if not self.lease.is_leader:  # checked with no await before the write
            raise NoLongerLeads(f"replica {self.lease.replica} no longer leads; reconnect")
        self.logs.append(job_id, task, attempt, first, lines)

    def received(self, job_id: int, task: str, attempt: int) -> int:
        return self.logs.received(job_id, task, attempt)


class _Listed:
    """What the agent's last hello or heartbeat on this connection listed as running (a
    heartbeat that says it is unchanged lists nothing), with its keys made once."""

    def __init__(self, running: list[RunningTask]) -> None:
        self.update(running)

    def update(self, running: list[RunningTask]) -> None:
        self.running = running
        self.keys = frozenset(r.key for r in running)


async def _serve(
    inbound: Inbound,
    reports: AgentReports,
    logs: _LeaderLogs,
    usage: UsageBoard,
    connection: AgentConnection,
    max_line: int,
    listed: _Listed,
) -> None:
    """Read the agent's frames and apply them, on two tasks.

    The reader notes that the agent is alive as each frame arrives, whatever the applier is
    waiting for (the controller's lock, the database): applying may lag behind under load,
    and a host whose heartbeats sat unread behind its own task reports would be taken for
    lost and its jobs placed again. Frames
    are applied in the order they came; a full backlog slows the reader down.
    """
    backlog: asyncio.Queue[object] = asyncio.Queue(BACKLOG_FRAMES)

    async def apply() -> None:
        while (message := await backlog.get()) is not _END:
            if isinstance(message, Heartbeat) and message.usage is None:
                _beat(reports, message, connection.host_name, listed)  # in memory only
                continue
            # Applied whole even if the channel drops meanwhile (see `to_the_end`).
            await to_the_end(_dispatch(reports, logs, usage, connection, message, max_line, listed))

    applier = asyncio.create_task(apply(), name=f"agent-apply-{connection.host_name}")
    try:
        twice = False
        while (incoming := await inbound.next(agent_message)) is not None:
            reports.heard_from(connection.host_name)
            if applier.done():
                break  # it failed: its exception is raised below
            if isinstance(incoming, Hello):
                # A protocol error, found as the frame arrives (not after the backlog):
                # the channel closes for it before any later frame is read.
                twice = True
                break
            await backlog.put(incoming)
        if not applier.done():
            await backlog.put(_END)  # what arrived before is still applied
        await applier
        if twice:
            raise HelloTwice
    finally:
        applier.cancel()


def _beat(reports: AgentReports, beat: Heartbeat, host: str, listed: _Listed) -> None:
    if not beat.running_unchanged:
        listed.update(beat.running)
    reports.on_heartbeat(host, listed.running, listed.keys)
    if beat.health is not None:
        reports.on_health(host, beat.health)


async def _dispatch(
    reports: AgentReports,
    logs: _LeaderLogs,
    usage: UsageBoard,
    connection: AgentConnection,
    message: object,
    max_line: int,
    listed: _Listed,
) -> None:
    host = connection.host_name
    if isinstance(message, Heartbeat):
        _beat(reports, message, host, listed)
        if message.usage is not None:
            await usage.record(host, message.usage)
    elif isinstance(message, TaskStarted):
        mode = None if message.warm is None else StartMode(message.warm, message.cold_reason)
        reports.on_task_started(host, message.key, message.pid, mode)
    elif isinstance(message, TaskExited):
        tail = [log_line(line, max_line) for line in message.exit.log_tail]
        await reports.on_task_exited(host, message.exit.model_copy(update={"log_tail": tail}))
    elif isinstance(message, Leaving):
        await reports.on_leaving(host, message.notice_seconds)
    elif isinstance(message, TaskLogs):
        key = message.key
        if not await _owns(reports, connection, key):
            # Acknowledged without storing: the agent drops them instead of resending forever.
            security.refused(
                f"agent {host}",
                f"logs of {key.task} of job {key.job_id} "
                f"(attempt {key.attempt}), which it does not run",
            )
            connection.send(LogsAck(key=key, next_line=message.first_line + len(message.lines)))
            return
        lines = [log_line(line, max_line) for line in message.lines]
        logs.append(key.job_id, key.task, key.attempt, message.first_line, lines)
        # Written (the file is flushed on close): the agent may now forget these lines.
        connection.send(
            LogsAck(key=key, next_line=logs.received(key.job_id, key.task, key.attempt))
        )


async def _owns(reports: AgentReports, connection: AgentConnection, key: TaskKey) -> bool:
    """Whether the task attempt runs (or ran) on this connection's host; remembered once seen."""
    own = (key.job_id, key.task, key.attempt)
    if own in connection.own_attempts:
        return True
    if await reports.attempt_ran_on(connection.host_name, key):
        connection.own_attempts.add(own)
        return True
    return False


BACKLOG_FRAMES = 10_000  # received, not yet applied: beyond this the reader waits
_END = object()


def log_line(line: str, max_chars: int) -> str:
    """A line as the log store keeps it: one line (a line break inside would shift every
    later line's number), at most `max_chars` characters, with a marker where it was cut."""
    if "\n" in line or "\r" in line:
        line = line.replace("\r\n", "\n").replace("\r", "\n").replace("\n", " ⏎ ")
    return cut_line(line, max_chars)
