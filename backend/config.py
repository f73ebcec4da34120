"""Server settings, read once per process from the environment (prefix ``STRATA_``)."""

from __future__ import annotations

import socket
from functools import cached_property
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url

from agents.protocol import MAX_LOG_LINE, MAX_LOG_LINE_CEILING, MAX_POINTS_PER_BATCH

DEFAULT_DATA_DIR = Path.home() / ".strata"
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]  # uvicorn's names
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
# The dashboard as `make ui` builds it in a checkout (npm run build in frontend/).
CHECKOUT_UI_DIR = Path(__file__).resolve().parents[1] / "frontend" / "dist"


class HealthSettings(BaseSettings):
    """What the server's health checks go by: sick hosts, hung jobs, stragglers (a part of
    `Settings`, read with it)."""

    model_config = SettingsConfigDict(env_prefix="STRATA_", extra="ignore")

    # A host whose tasks fail for infrastructure causes this often is cordoned (0: never).
    host_failure_cordon_count: int = Field(
        default=3, ge=0, description="Infrastructure failures that cordon a host; 0: none do."
    )
    host_failure_cordon_minutes: float = Field(
        default=10.0, ge=0, description="Within how many minutes; 0: never cordon for them."
    )
    host_clock_offset_seconds: float = Field(
        default=30.0,
        ge=0,
        description="How far an agent's clock may be from the server's before it is a fault "
        "that cordons its host; 0: never.",
    )

    hang_timeout: float = Field(
        default=120.0,
        ge=0,
        description="Seconds a running job's step may stand still before it is hung, at least "
        "(a job's spec.hang_timeout wins; else 5x its median recent step time if longer); "
        "0: no hang detection by default.",
    )

    straggler_window_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds of per-worker rates a parameter_server worker is judged a "
        "straggler over (under the median / 1.5); 0: no straggler detection.",
    )
    straggler_cooldown_seconds: float = Field(
        default=600.0,
        ge=0,
        description="After a straggler of a job was moved (stragglers: restart), this long "
        "before another worker of it may move; slow ones are only reported meanwhile.",
    )


class LeadershipSettings(BaseSettings):
    """How server replicas on one PostgreSQL choose their leader (backend.leadership; a part
    of `Settings`, read with it)."""

    model_config = SettingsConfigDict(env_prefix="STRATA_", extra="ignore")

    leader_lease_seconds: float = Field(
        default=4.0,
        gt=0,
        description="How long the leader's lease lasts unrenewed (renewed every third of it): "
        "a leader that stops renewing steps down, and another replica takes over, after this "
        "long. PostgreSQL only: on SQLite the one server always leads.",
    )
    advertise_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/\s]+$",
        description="Where the other replicas reach this one (http[s]://host:port) to forward "
        "requests to it while it leads; unset: this server's host and port.",
    )
    shared_dir: Path | None = Field(
        default=None,
        description="Task logs, code bundles and TensorBoard logs: a directory every replica "
        "mounts (the same one) when several share a PostgreSQL database; unset: the data dir.",
    )


class Settings(HealthSettings, LeadershipSettings):
    """Everything the server process needs to know about its environment."""

    model_config = SettingsConfigDict(env_prefix="STRATA_", extra="ignore")

    data_dir: Path = Field(default=DEFAULT_DATA_DIR, description="Logs, checkpoints, SQLite file.")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; SQLite under the data dir when unset."
    )
    api_token: SecretStr | None = Field(default=None, description="Admin token for REST and CLI.")
    agent_token: SecretStr | None = Field(default=None, description="Token agents join with.")
    # The *_FILE convention of container secrets: the value is read from a file, so that it
    # never sits in the process environment or in `docker inspect`. A value given directly wins.
    api_token_file: Path | None = Field(default=None, description="A file holding api_token.")
    agent_token_file: Path | None = Field(default=None, description="A file holding agent_token.")
    database_password_file: Path | None = Field(
        default=None, description="A file holding the password for database_url's user."
    )
    tls_certfile: Path | None = Field(
        default=None, description="Serve HTTPS and WSS with this certificate (PEM, chain first)."
    )
    tls_keyfile: Path | None = Field(default=None, description="The certificate's key (PEM).")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    checkpoint_root: Path | None = Field(
        default=None,
        description="Where job checkpoint dirs live (shared storage on a real cluster); "
        "<data dir>/checkpoints when unset.",
    )
    heartbeat_seconds: float = Field(default=1.0, gt=0, description="Agents beat this often.")
    max_heartbeats_per_second: float = Field(
        default=1000.0,
        gt=0,
        description="The most heartbeats the whole fleet sends a second: a larger fleet is "
        "told a longer period (backend.scheduling.pace).",
    )
    # A host whose agent has been silent this long is marked lost (at heartbeat_seconds; it
    # is stretched with the period).
    heartbeat_timeout_seconds: float = Field(default=6.0, gt=0)
    stop_grace_seconds: float = Field(default=10.0, ge=0, description="SIGTERM → SIGKILL.")
    reconcile_seconds: float = Field(default=0.5, gt=0, description="Controller loop period.")
    sweep_poll_seconds: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="How often running sweeps are looked at: new intermediate values reported "
        "to the pruner, ended trials replaced.",
    )
    shutdown_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long shutdown waits for the background services to end once "
        "cancelled, then for each of its connections and processes to close; whatever has "
        "not ended by then is logged and left behind.",
    )
    log_bytes_per_task: int = Field(default=64 << 20, gt=0, description="Cap per task attempt.")
    max_request_bytes: int = Field(default=1 << 20, gt=0)
    max_code_bytes: int = Field(
        default=256 << 20,
        gt=0,
        description="The largest code bundle PUT /code/{sha256} takes (its own limit, "
        "instead of max_request_bytes).",
    )
    # Websocket limits (docs/reference/limits.md). Frame sizes count characters of a
    # text frame; uvicorn refuses any frame over 16 MiB before these are looked at.
    agent_frame_bytes: int = Field(
        default=4 << 20,
        gt=0,
        description="Largest frame an agent may send on /agents/connect (a log batch is ≤1 MiB).",
    )
    runtime_frame_bytes: int = Field(
        default=8 << 20,
        gt=0,
        description="Largest frame a training process may send on /tasks/connect "
        "(its metric batches stay under 2 MiB).",
    )
    stream_frame_bytes: int = Field(
        default=70_000,
        gt=0,
        description="Largest frame a browser may send on /jobs/{id}/stream and /stream "
        "(a subscribe frame with a cursor of up to 64 KiB).",
    )
    agent_frames_per_second: float = Field(
        default=2_000.0,
        gt=0,
        description="Sustained frames per second one agent connection may send.",
    )
    agent_frame_burst: int = Field(
        default=20_000,
        gt=0,
        description="Frames an agent may send at once above that rate (resending its log "
        "backlog after a reconnect).",
    )
    runtime_frames_per_second: float = Field(
        default=200.0,
        gt=0,
        description="Sustained frames per second one training process may send.",
    )
    runtime_frame_burst: int = Field(
        default=1_000,
        gt=0,
        description="Frames a training process may send at once above that rate.",
    )
    stream_frames_per_second: float = Field(
        default=10.0,
        gt=0,
        description="Sustained frames per second one stream subscriber may send "
        "(a browser sends one subscribe frame).",
    )
    stream_frame_burst: int = Field(
        default=100,
        gt=0,
        description="Frames a stream subscriber may send at once above that rate.",
    )
    stream_subscribe_seconds: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="How long a new stream waits for its subscribe frame before closing "
        "(1008, with the frame to send in the reason).",
    )
    max_log_line_chars: int = Field(
        default=MAX_LOG_LINE,
        ge=256,
        le=MAX_LOG_LINE_CEILING,
        description="Longer log lines from agents are cut, with a marker saying by how much; "
        "the server tells its agents (welcome), which cut their tasks' lines there.",
    )
    max_metric_batch_points: int = Field(
        default=MAX_POINTS_PER_BATCH,
        gt=0,
        le=MAX_POINTS_PER_BATCH,
        description="Points in one metrics frame from a training process; more closes the "
        "socket (1009).",
    )
    max_streams_per_token: int = Field(
        default=256,
        gt=0,
        description="Open /jobs/{id}/stream and /stream sockets per token; one more is "
        "closed (1008) and the older ones keep working.",
    )
    log_level: LogLevel = Field(
        default="info", description="The server's and uvicorn's: " + ", ".join(LOG_LEVELS) + "."
    )
    # Off by default: the dashboard and `strata up` poll several times a second, and a line per
    # request buries what matters (agents joining and leaving, jobs changing state).
    access_log: bool = Field(
        default=False,
        description="Log a line for every HTTP request and websocket connection.",
    )
    ui_dir: Path | None = Field(
        default=None,
        description="The built dashboard (index.html and assets), served at /ui/; "
        "frontend/dist of this checkout when unset.",
    )
    # TensorBoard per job, or per set of jobs compared (backend/tensorboard).
    tensorboard_max: int = Field(
        default=4,
        ge=0,
        le=64,
        description="TensorBoard processes the server runs at once (0: none); one more is a 409.",
    )
    tensorboard_idle_seconds: float = Field(
        default=600.0, gt=0, description="A TensorBoard nobody used for this long is stopped."
    )
    tensorboard_start_seconds: float = Field(
        default=60.0, gt=0, description="How long a TensorBoard may take to start serving."
    )

    preemptible: bool = Field(
        default=True, description="A job's preemptible when its spec leaves it unset."
    )
    interruption_deadline_seconds: float = Field(
        default=60.0, gt=0, description="How long an interruption waits for its checkpoint."
    )

    # The client coordinator of a job with coordinator: client (runtime.connect).
    client_idle_timeout: float = Field(
        default=1800.0,
        gt=0,
        description="A job whose coordinator is the client ends after this many seconds with "
        "no client attached (its spec's client_idle_timeout wins).",
    )
    client_heartbeat_seconds: float = Field(
        default=5.0, gt=0, description="A client coordinator says it is alive this often."
    )
    client_lost_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A client silent this long is detached as gone (a killed kernel, a "
        "closed laptop).",
    )

    # Slurm (docs/slurm.md): a job whose spec has a `slurm:` section runs as one Slurm job.
    slurm_enabled: bool = Field(
        default=False,
        description="Run jobs that ask for Slurm (spec.slurm) with the Slurm commands on "
        "this host; such jobs are refused when off.",
    )
    slurm_bin_dir: Path | None = Field(
        default=None,
        description="Where sbatch, squeue, scancel and sacct are; looked up on PATH when unset.",
    )
    slurm_conf: Path | None = Field(
        default=None,
        description="The slurm.conf the commands read (their SLURM_CONF); Slurm's own "
        "default when unset.",
    )
    slurm_partition: str | None = Field(
        default=None, description="The partition of jobs whose spec names none."
    )
    slurm_account: str | None = Field(
        default=None, description="The account of jobs whose spec names none."
    )
    slurm_accounting: Literal["sacct", "completion", "none"] = Field(
        default="sacct",
        description="How the end of a job that has left squeue is read: sacct (slurmdbd), "
        "completion (sacct --completion, the job completion plugin) or none.",
    )
    slurm_job_prefix: str = Field(
        default="strata",
        pattern=r"[A-Za-z][A-Za-z0-9_-]{0,31}",
        description="Slurm job names are <prefix>-<job id>; servers sharing a Slurm cluster "
        "need different prefixes.",
    )
    slurm_poll_seconds: float = Field(
        default=2.0, gt=0, description="How often squeue is read while Slurm jobs are live."
    )
    slurm_command_timeout_seconds: float = Field(
        default=30.0, gt=0, description="A Slurm command that runs longer is given up on."
    )
    slurm_output_dir: Path | None = Field(
        default=None,
        description="Where the batch scripts' own output goes (<dir>/<prefix>-<job id>-%j.out, "
        "written by the compute node); discarded when unset.",
    )
    slurm_workdir: Path | None = Field(
        default=None,
        description="Where the batch script and its agents start (sbatch --chdir): the "
        "agents' workspace, under which jobs' working_dir resolves; the server's own "
        "working directory when unset.",
    )
    slurm_server_url: str | None = Field(
        default=None,
        description="The server's URL as the compute nodes reach it (the job-bound agents "
        "connect there).",
    )
    slurm_agent_command: str = Field(
        default="strata agent",
        description="The command that starts an agent on a compute node (split like a shell "
        "would, never run by one); the batch script adds --server, --name, --gpus and "
        "--notice.",
    )
    slurm_agent_notice_seconds: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="The --notice of a Slurm job's agents; keep it under Slurm's KillWait "
        "(GraceTime with preemption). 0: their tasks stop at once, to resume from a backup.",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_case_level(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("data_dir")
    @classmethod
    def _absolute_data_dir(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("TLS needs both tls_certfile and tls_keyfile, or neither")
        for path in (self.tls_certfile, self.tls_keyfile):
            if path is not None and not path.is_file():
                raise ValueError(f"TLS: {path} is not a readable file")
        return self

    @model_validator(mode="after")
    def _tokens_from_files(self) -> Settings:
        if self.api_token is None and self.api_token_file is not None:
            self.api_token = SecretStr(read_secret_file(self.api_token_file, "api_token_file"))
        if self.agent_token is None and self.agent_token_file is not None:
            self.agent_token = SecretStr(
                read_secret_file(self.agent_token_file, "agent_token_file")
            )
        return self

    @property
    def checkpoints(self) -> Path:
        return (self.checkpoint_root or self.shared / "checkpoints").expanduser().resolve()

    @property
    def shared(self) -> Path:
        """Files every replica must see (task logs, code bundles): the shared dir or the data
        dir."""
        return (self.shared_dir or self.data_dir).expanduser().resolve()

    @property
    def replica_url(self) -> str:
        """Where the other replicas reach this one."""
        if self.advertise_url is not None:
            return self.advertise_url
        every_interface = self.host in ("0.0.0.0", "::", "")  # noqa: S104 (compared, not bound)
        host = socket.gethostname() if every_interface else self.host
        scheme = "https" if self.tls_certfile is not None else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def dashboard_dir(self) -> Path:
        return (self.ui_dir or CHECKOUT_UI_DIR).expanduser().resolve()

    @cached_property
    def resolved_database_url(self) -> str:
        """The async SQLAlchemy URL the server connects with."""
        if self.database_url:
            url = async_database_url(self.database_url)
            if self.database_password_file is None:
                return url
            password = read_secret_file(self.database_password_file, "database_password_file")
            return make_url(url).set(password=password).render_as_string(hide_password=False)
        return f"sqlite+aiosqlite:///{self.data_dir / 'strata.db'}"


def async_database_url(url: str) -> str:
    """Map the plain URLs users write to the async drivers the server uses.

    ``postgresql://`` becomes ``postgresql+asyncpg://`` and ``sqlite://`` becomes
    ``sqlite+aiosqlite://``; URLs that already name a driver are kept as they are.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(
            f"database URL {url!r} has no scheme (expected sqlite:// or postgresql://)"
        )
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+asyncpg://{rest}"
    if scheme == "sqlite":
        return f"sqlite+aiosqlite://{rest}"
    if scheme in ("postgresql+asyncpg", "sqlite+aiosqlite"):
        return url
    raise ValueError(
        f"database URL scheme {scheme!r} is not supported (expected sqlite:// or postgresql://)"
    )


def read_secret_file(path: Path, setting: str) -> str:
    """The secret in `path`: its text without the trailing newline that editors and echo add."""
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    if not value:
        raise ValueError(f"{setting}: {path} is empty")
    return value
