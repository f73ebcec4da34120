"""Messages on the agent channel (one websocket per agent), one typed union per direction.

The server imports these; they import nothing from the server. Every message that can be
resent is safe to apply twice: tasks are named by (job_id, task, attempt), and log batches
carry the number of their first line.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from agents.runtime_environment import EngineInfo, RuntimeEnvironment
from agents.vocabulary import TaskNameText

# 2: TaskExit.refused; 3: Hello.identity; 4: environments (image, python); 5: Heartbeat.usage;
# 6: Heartbeat.running_unchanged; 7: TaskExit.agent_stopping; 8: Leaving; 9: TaskExit.interrupted;
# 10: CollectStacks, Heartbeat.health
PROTOCOL_VERSION = 10
# Websocket keepalive of agents and runtimes: a ping this often, and a server that has not
# answered one within the timeout is taken for gone (a paused leader keeps its sockets open).
KEEPALIVE_PING_SECONDS = 5.0
KEEPALIVE_TIMEOUT_SECONDS = 10.0
MAX_LOG_LINE = 16_384  # characters; longer lines are cut, with a marker (cut_line)
# The most a server may set its line limit to (Welcome.max_log_line_chars): 30 lines of the
# exit's log tail, and a batch's one line over MAX_LOG_BATCH_CHARS, must fit an agent frame.
MAX_LOG_LINE_CEILING = 65_536
MAX_LOG_BATCH = 1_000  # lines per task_logs message
MAX_LOG_BATCH_CHARS = 512 * 1024  # characters of lines per task_logs message (one line more)
MAX_TASKS_LISTED = 10_000  # attempts in one hello or heartbeat
MAX_INT32 = 2**31 - 1  # ids, pids, attempts, exit codes: what the database columns hold
MAX_INT64 = 2**63 - 1
IDENTITY_PATTERN = r"^[A-Za-z0-9._-]{16,128}$"  # an agent's persistent identity


def cut_line(line: str, limit: int = MAX_LOG_LINE) -> str:
    """`line` itself if it has at most `limit` characters, else its start and a marker saying
    how many characters were cut, `limit` characters in all (`limit` must exceed 60)."""
    if len(line) <= limit:
        return line
    cut = len(line) - limit
    while True:  # the marker's length depends on the count it carries: a few rounds at most
        marker = f" [strata: line cut, {cut} more characters]"
        if len(line) - (limit - len(marker)) == cut:
            return line[: limit - len(marker)] + marker
        cut = len(line) - (limit - len(marker))


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskKey(_Message):
    """One run of one task: a restart is a new attempt with a new key."""

    job_id: int = Field(ge=1, le=MAX_INT32)
    task: TaskNameText  # "worker:1"
    attempt: int = Field(ge=0, le=MAX_INT32)


class RunningTask(_Message):
    key: TaskKey
    pid: int = Field(ge=0, le=MAX_INT32)


class Device(_Message):
    index: int = Field(ge=0, le=1023)
    name: str = Field(max_length=128)
    kind: Literal["gpu"] = "gpu"
    uuid: str | None = Field(default=None, max_length=128)
    memory_mb: int | None = Field(default=None, ge=0, le=MAX_INT32)
    simulated: bool = False


class TaskExit(_Message):
    key: TaskKey
    # None when the process could not be started at all
    exit_code: int | None = Field(ge=-MAX_INT32, le=MAX_INT32)
    signal: int | None = Field(default=None, ge=0, le=1024)  # the signal that ended it, if one did
    error: str | None = Field(default=None, max_length=4096)  # why it could not start
    # Why the task stopped itself for good (agents.runtime.refusal): the job fails with this
    # reason and is not restarted.
    refused: str | None = Field(default=None, max_length=4096)
    # The task saved on a stop signal and exited (agents.runtime.refusal): an interruption,
    # which the job resumes from without counting a failure.
    interrupted: str | None = Field(default=None, max_length=4096)
    log_tail: list[str] = Field(default_factory=list, max_length=50)
    # The task's memory limit in bytes, when the kernel killed a process of the attempt for
    # going over it (StartTask.memory_limit, enforced by the attempt's cgroup).
    over_memory_limit: int | None = Field(default=None, ge=1, le=MAX_INT64)
    # What the attempt's processes used together, where its cgroup counts it.
    cpu_seconds: float | None = Field(default=None, ge=0)
    memory_peak_bytes: int | None = Field(default=None, ge=0, le=MAX_INT64)
    # The agent itself was stopping (SIGTERM or SIGINT) when the attempt ended: the end says
    # nothing about the task. In a Slurm allocation it is the allocation going away (a
    # requeue), which costs the job no failure.
    agent_stopping: bool = False


Port = Annotated[int, Field(ge=0, le=65535)]


# --- agent → server -----------------------------------------------------------------


class Hello(_Message):
    """The first frame: who the agent is, what it offers, and what it still runs."""

    type: Literal["hello"] = "hello"
    protocol: int = PROTOCOL_VERSION  # the server refuses an agent that speaks another
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    # Made once and kept in the agent's state dir: the server refuses a hello for a name
    # whose connected agent presents another one (two hosts under one name). Optional only
    # so that an older agent's hello still parses and hears why it is refused (its protocol).
    identity: str | None = Field(default=None, pattern=IDENTITY_PATTERN)
    address: str = Field(min_length=1, max_length=255)  # how other hosts reach its tasks
    port_range: tuple[Port, Port]
    devices: list[Device] = Field(default_factory=list, max_length=1024)
    version: str = Field(max_length=64)
    running: list[RunningTask] = Field(default_factory=list, max_length=MAX_TASKS_LISTED)
    # The container engine it can start tasks in (environment.image); None: it has none.
    engine: EngineInfo | None = None
    # Exits that happened while the channel was down, so that none is lost.
    finished: list[TaskExit] = Field(default_factory=list, max_length=MAX_TASKS_LISTED)


class DeviceStats(_Message):
    """What one GPU is doing, as NVML reports it."""

    index: int = Field(ge=0, le=1023)
    utilization_percent: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)
    memory_used_bytes: int | None = Field(default=None, ge=0, le=MAX_INT64)
    memory_total_bytes: int | None = Field(default=None, ge=0, le=MAX_INT64)


class TaskStats(_Message):
    """What one task attempt's processes use together."""

    key: TaskKey
    cpu_seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)  # so far
    # Of one core, averaged since the previous sample (200: two cores busy); None at first.
    cpu_percent: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    rss_bytes: int | None = Field(default=None, ge=0, le=MAX_INT64)


class UsageReport(_Message):
    """A sample of the host's devices and tasks (agents.host.usage), every few seconds.
    Simulated devices are left out: they have nothing true to report."""

    # Seconds since the epoch, when it was sampled.
    wall_time: float = Field(ge=0, le=253_402_300_799, allow_inf_nan=False)
    devices: list[DeviceStats] = Field(default_factory=list, max_length=1024)
    tasks: list[TaskStats] = Field(default_factory=list, max_length=MAX_TASKS_LISTED)


HealthFaultKind = Literal[
    "gpu_lost",
    "ecc_uncorrected",
    "retired_pages_pending",
    "xid",
    "throttled",
    "disk_space",
    "clock_offset",
]


class HealthFault(_Message):
    """One thing wrong with the host (agents.host.health): a fault takes the host out of
    service; the same shape as a warning, which is only reported."""

    kind: HealthFaultKind
    device: int | None = Field(default=None, ge=0, le=1023)  # the GPU's index, for a GPU
    path: str | None = Field(default=None, max_length=1024)  # the directory, for disk space
    detail: str = Field(max_length=512)  # in words, e.g. "uncorrectable ECC errors (3)"
    # A figure that only grows while the fault lasts (ECC errors, an XID code): a larger one
    # is a new fault even after an operator cleared this one.
    count: int | None = Field(default=None, ge=0, le=MAX_INT64)


class HostHealth(_Message):
    """What the agent's probes found (GPUs through NVML, free disk space), every few beats."""

    faults: list[HealthFault] = Field(default_factory=list, max_length=1024)
    warnings: list[HealthFault] = Field(default_factory=list, max_length=1024)
    # Probes that could not answer this time (NVML gone, a path unreadable): neither healthy
    # nor faulty.
    unknown: list[str] = Field(default_factory=list, max_length=64)
    # Seconds since the epoch: when the probes ran, and when this went into its heartbeat
    # (the server compares the latter with its own clock).
    checked_at: float = Field(ge=0, le=253_402_300_799, allow_inf_nan=False)
    wall_time: float = Field(ge=0, le=253_402_300_799, allow_inf_nan=False)


class Heartbeat(_Message):
    type: Literal["heartbeat"] = "heartbeat"
    running: list[RunningTask] = Field(default_factory=list, max_length=MAX_TASKS_LISTED)
    # True: the agent runs what its last hello or heartbeat on this connection listed, and
    # `running` is left empty: reading every agent's unchanged list on every beat would be
    # most of what heartbeats cost the server.
    running_unchanged: bool = False
    usage: UsageReport | None = None  # in a heartbeat every few seconds, not in each one
    health: HostHealth | None = None  # as usage: every few seconds, with what probes found

    @model_validator(mode="after")
    def _one_list(self) -> Heartbeat:
        if self.running_unchanged and self.running:
            raise ValueError("running_unchanged: true comes with an empty running list")
        return self

    def since(self, last: list[RunningTask] | None) -> Heartbeat:
        """This heartbeat as sent after one that listed `last` on the same connection (None:
        nothing listed yet): an unchanged list is left out."""
        if last is None or self.running != last:
            return self
        return self.model_copy(update={"running": [], "running_unchanged": True})


class TaskStarted(_Message):
    type: Literal["task_started"] = "task_started"
    key: TaskKey
    pid: int = Field(ge=0, le=MAX_INT32)
    # Whether a warm process (TensorFlow already imported) took the attempt, and if not, why
    # it started cold; None: the agent does not say (a container, an older agent).
    warm: bool | None = None
    cold_reason: str | None = Field(default=None, max_length=512)

    @model_serializer(mode="wrap")
    def _omit_unsaid(self, handler: SerializerFunctionWrapHandler) -> object:
        # Left out when None, so that a start report without them reads as it did before.
        data = handler(self)
        if isinstance(data, dict):
            for optional in ("warm", "cold_reason"):
                if data.get(optional) is None:
                    data.pop(optional, None)
        return data


class TaskExited(_Message):
    type: Literal["task_exited"] = "task_exited"
    exit: TaskExit


class TaskLogs(_Message):
    """Lines from a task's stdout and stderr, numbered from ``first_line`` (0-based)."""

    type: Literal["task_logs"] = "task_logs"
    key: TaskKey
    first_line: int = Field(ge=0, le=MAX_INT64)
    lines: list[str] = Field(max_length=MAX_LOG_BATCH)  # the server cuts over-long ones


class Leaving(_Message):
    """The agent was told to stop (SIGTERM: Slurm's requeue or preemption, a spot notice,
    systemctl stop) and gives the server `notice_seconds` to checkpoint and move its tasks
    before it stops them itself."""

    type: Literal["leaving"] = "leaving"
    notice_seconds: float = Field(ge=0, le=3600)


AgentMessage = Annotated[
    Hello | Heartbeat | TaskStarted | TaskExited | TaskLogs | Leaving, Field(discriminator="type")
]
agent_message = TypeAdapter[AgentMessage](AgentMessage)


# --- server → agent -----------------------------------------------------------------


class Welcome(_Message):
    type: Literal["welcome"] = "welcome"
    heartbeat_seconds: float
    # The server's STRATA_MAX_LOG_LINE_CHARS: the agent cuts its tasks' lines there.
    max_log_line_chars: int = Field(default=MAX_LOG_LINE, ge=256, le=MAX_LOG_LINE_CEILING)

    @model_serializer(mode="wrap")
    def _omit_default_line_limit(self, handler: SerializerFunctionWrapHandler) -> object:
        # Left out at its default, so that an agent of the same protocol that predates the
        # field (its models forbid unknown fields) still reads the welcome.
        data = handler(self)
        if isinstance(data, dict) and data.get("max_log_line_chars") == MAX_LOG_LINE:
            del data["max_log_line_chars"]
        return data


class StartTask(_Message):
    """Start this attempt of a task unless it already runs (starting twice is harmless)."""

    type: Literal["start_task"] = "start_task"
    key: TaskKey
    argv: list[str] = Field(min_length=1)
    working_dir: str  # relative to the agent's workspace root, or to the code bundle's
    env: dict[str, str]
    port: int
    gpus: list[int]
    # Bytes the attempt's processes may use together (the spec's replicas.<role>.memory),
    # enforced by its cgroup where the agent has a memory controller; None: no limit.
    memory_limit: int | None = Field(default=None, ge=1, le=MAX_INT64)
    # The code bundle the attempt runs in (working_dir is then relative to it); None: the
    # agent's workspace.
    code_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # The image or interpreter the attempt runs in; None: the agent's own interpreter.
    environment: RuntimeEnvironment | None = None
    # False: never in a warm process (the spec's warm_start), always a fresh interpreter.
    warm_start: bool = True

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> object:
        # Left out at their defaults, so that a start without them reads as it did before.
        data = handler(self)
        if isinstance(data, dict):
            for optional in ("code_sha256", "environment"):
                if data.get(optional) is None:
                    data.pop(optional, None)
            if data.get("warm_start") is True:
                del data["warm_start"]
        return data


class StopTask(_Message):
    """Stop this attempt: SIGTERM to its processes, SIGKILL to all after the grace period."""

    type: Literal["stop_task"] = "stop_task"
    key: TaskKey
    grace_seconds: float = 10.0
    reason: str = ""


class LogsAck(_Message):
    """Every line of this attempt numbered below ``next_line`` is stored; forget them."""

    type: Literal["logs_ack"] = "logs_ack"
    key: TaskKey
    next_line: int


class HeartbeatPeriod(_Message):
    """Beat this often from now on: the server stretches the period as the fleet grows, so
    that it takes a bounded number of heartbeats a second in all."""

    type: Literal["heartbeat_period"] = "heartbeat_period"
    heartbeat_seconds: float = Field(gt=0)


class Refused(_Message):
    """The server will not talk to this agent; it closes the socket after this frame."""

    type: Literal["refused"] = "refused"
    reason: str


class CollectStacks(_Message):
    """Write the stacks of every thread of these attempts' processes into their logs (the
    job is about to be restarted as hung): Python's through the runtime's faulthandler where
    it is installed, and each thread's state and kernel wait channel."""

    type: Literal["collect_stacks"] = "collect_stacks"
    keys: list[TaskKey] = Field(max_length=MAX_TASKS_LISTED)
    reason: str = Field(default="", max_length=1024)


ServerMessage = Annotated[
    Welcome | StartTask | StopTask | LogsAck | HeartbeatPeriod | Refused | CollectStacks,
    Field(discriminator="type"),
]
server_message = TypeAdapter[ServerMessage](ServerMessage)


# --- the runtime channel (/tasks/connect): a training process and the server ------------
#
# A task sends numbered metric points; the server acknowledges the highest number it has
# durably stored, and the task forgets points up to it. After a reconnect the task resends
# what is unacknowledged, and the server's unique key drops what it already has.

MAX_POINTS_PER_BATCH = 5_000
METRIC_NAME_PATTERN = r"^[A-Za-z0-9_.:/\-]{1,128}$"


class MetricPoint(_Message):
    # A diverged loss is worth seeing: NaN and infinities travel as the JSON extensions
    # NaN/Infinity, which both ends parse, rather than as null.
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    seq: int = Field(ge=0, le=MAX_INT64)  # per task attempt, from 0, increasing by one
    name: str = Field(pattern=METRIC_NAME_PATTERN)  # "loss", "val_accuracy", "steps_per_sec"
    step: int = Field(ge=0, le=2**62)
    value: float = Field(allow_inf_nan=True)
    wall_time: float  # seconds since the epoch, when the value was observed


class TaskHello(_Message):
    """First frame of a runtime: which task attempt it is (the token names the job)."""

    type: Literal["task_hello"] = "task_hello"
    task: TaskNameText  # "worker:1"
    attempt: int = Field(ge=0, le=MAX_INT32)


class MetricBatch(_Message):
    type: Literal["metrics"] = "metrics"
    points: list[MetricPoint] = Field(min_length=1, max_length=MAX_POINTS_PER_BATCH)


CHECKPOINT_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}$"
CheckpointName = Annotated[str, Field(pattern=CHECKPOINT_NAME_PATTERN)]


class CheckpointSaved(_Message):
    """A checkpoint the runtime wrote, and the ones its retention policy deleted.

    Names are checkpoint prefixes inside the job's checkpoint dir (``ckpt-120`` for the files
    ``ckpt-120.index`` and ``ckpt-120.data-*``), never paths: the server joins them to the
    dir it gave the task, so a report cannot point anywhere else. The server stores it once
    per name and answers `CheckpointAck`; the runtime resends until it has that answer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    type: Literal["checkpoint"] = "checkpoint"
    name: CheckpointName
    step: int = Field(ge=0, le=2**62)  # the optimizer's iteration count in the checkpoint
    epoch: int | None = Field(default=None, ge=0, le=MAX_INT32)  # epochs done when written
    size_bytes: int = Field(ge=0, le=MAX_INT64)
    # Seconds since the epoch, when the write finished (up to the year 9999).
    wall_time: float = Field(ge=0, le=253_402_300_799, allow_inf_nan=False)
    # "export": the trained model, written when fit ended (the spec's `export`).
    trigger: Literal["epoch", "time", "command", "interruption", "end", "export"]
    command_id: int | None = None  # the checkpoint-now request it answers
    # tf_checkpoint: tf.train.Checkpoint files (<name>.index, <name>.data-*); saved_model: a
    # SavedModel dir; keras: a .keras file (the name includes the suffix).
    format: Literal["tf_checkpoint", "saved_model", "keras"] = "tf_checkpoint"
    keras: Literal["tf_keras", "keras3"] | None = None  # the Keras whose model wrote it
    metrics: dict[Annotated[str, Field(pattern=METRIC_NAME_PATTERN)], float] = Field(
        default_factory=dict, max_length=200
    )
    deleted: list[CheckpointName] = Field(default_factory=list, max_length=1000)


class CommandFailed(_Message):
    """The runtime could not carry out a command (the reason says why)."""

    type: Literal["command_failed"] = "command_failed"
    id: int
    reason: str = Field(max_length=4096)


# What a training process is doing that may keep its step from advancing for a while: none
# of these is a hang (the first call of a train or test function traces and compiles it).
BusyPhase = Literal["tracing", "evaluating", "checkpointing", "exporting"]


class Progress(_Message):
    """Where training is, sent when it changes (at most about once a second) and after each
    reconnect. Not stored: the server keeps the latest in memory, for progress, rates and
    hang detection."""

    type: Literal["progress"] = "progress"
    # The global step trained; under ParameterServerStrategy the last one known to have run.
    step: int = Field(ge=0, le=2**62)
    # Epochs x steps per epoch, where fit knows both; None: unknown.
    total_steps: int | None = Field(default=None, ge=1, le=2**62)
    epoch: int | None = Field(default=None, ge=0, le=MAX_INT32)  # the epoch under way, 0-based
    epochs: int | None = Field(default=None, ge=1, le=MAX_INT32)  # fit's epochs
    busy: BusyPhase | None = None
    # False once fit has returned: the step stands still from then on, and that is no hang.
    training: bool = True


RuntimeMessage = Annotated[
    TaskHello | MetricBatch | CheckpointSaved | CommandFailed | Progress,
    Field(discriminator="type"),
]
runtime_message = TypeAdapter[RuntimeMessage](RuntimeMessage)


class TaskWelcome(_Message):
    """The server's answer to task_hello: where to resume numbering after a restart."""

    type: Literal["task_welcome"] = "task_welcome"
    next_seq: int  # one past the highest sequence number stored for this attempt


class Ack(_Message):
    type: Literal["ack"] = "ack"
    seq: int  # every point with a number up to this one is stored


class Command(_Message):
    """A control command for the training process: checkpoint now; or interrupt: the same
    checkpoint, with a backup to resume from, after which training holds for `hold_seconds`
    (the server stops the task meanwhile; if it does not, training goes on). A task is
    stopped by its agent, with SIGTERM to its process group, not through the runtime."""

    type: Literal["command"] = "command"
    id: int
    action: Literal["checkpoint", "interrupt"]
    hold_seconds: float = Field(default=0.0, ge=0, le=3600)


class CheckpointAck(_Message):
    """The checkpoint report with this name is stored; the runtime forgets it."""

    type: Literal["checkpoint_ack"] = "checkpoint_ack"
    name: str


RuntimeServerMessage = Annotated[
    TaskWelcome | Ack | Command | CheckpointAck, Field(discriminator="type")
]
runtime_server_message = TypeAdapter[RuntimeServerMessage](RuntimeServerMessage)
