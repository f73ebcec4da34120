"""The job spec: what a user submits, validated strictly before anything is stored.

Parsing is strict (no "5" for 5) and closed (unknown fields are errors), and every problem
is reported against the dotted path of the field it concerns, so that a user, the CLI and the
dashboard can show the message beside the offending line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agents.environment import TaskEnvironment
from agents.memory_size import format_memory, parse_memory
from agents.options import ExportOptions, StrategyOptions
from agents.protocol import METRIC_NAME_PATTERN
from agents.runtime_environment import RuntimeEnvironment
from agents.vocabulary import TRAINING_ROLES, Role, Strategy
from backend.errors import FieldIssue, InvalidInput, UnsupportedMediaType, dotted
from backend.jobs.slurm_options import SlurmOptions
from backend.teams.roles import TEAM_NAME_PATTERN

ROLES: tuple[Role, ...] = tuple(Role)  # every role, in display order

MAX_TASKS_PER_ROLE = 256
MAX_GPUS_PER_TASK = 16
MIN_TASK_MEMORY = 16 * 1024**2  # below this not even an interpreter starts
MAX_TASK_MEMORY = 64 * 1024**4
MAX_TASKS_PER_JOB = 512

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:=-]{0,31}")
MAX_TAGS = 16
MAX_DESCRIPTION = 4000
ENV_KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Set by Strata for every task; a job may not override them. Two are left to jobs as before:
# TF_USE_LEGACY_KERAS (Strata's value wins anyway) and the agent's CA file: specs stored with
# them must still load.
RESERVED_ENV = TaskEnvironment.variables() - {
    TaskEnvironment.variable("legacy_keras"),
    TaskEnvironment.variable("ca_file"),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


MAX_PATH_CHARS = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _relative_path(value: str, what: str, root: str) -> str:
    """A path that stays under the root it is resolved against (the agent's workspace, the
    checkpoint root): relative, '/'-separated, no '..', no NUL or other control character.

    Symlinks cannot be judged here (the spec is checked before any host is chosen): the
    agent resolves the working dir and refuses one that leaves its workspace.
    """
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL bytes, got {value!r}")
    if _CONTROL.search(value):
        raise ValueError(f"{what} must not contain control characters, got {value!r}")
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"{what} must be at most {MAX_PATH_CHARS} characters, got {len(value)}")
    if "\\" in value:
        raise ValueError(f"{what} must use '/' as its separator, not '\\', got {value!r}")
    path = PurePosixPath(value)
    if path.is_absolute():
        raise ValueError(f"{what} must be relative to {root}, got {value!r}")
    if ".." in path.parts:
        raise ValueError(f"{what} must stay inside {root}: no '..' parts, got {value!r}")
    return value


def safe_name(value: str) -> str:
    """A job's (or a sweep's) name: safe in paths, tags and Slurm's job names."""
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            "must be 1-63 characters of letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit; got {value!r}"
        )
    return value


class ReplicaSpec(_Strict):
    count: Annotated[int, Field(ge=0, le=MAX_TASKS_PER_ROLE)] = 0
    gpus: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_TASK, description="GPUs per task.")] = 0
    memory: str | None = Field(
        default=None,
        max_length=32,
        description="Memory per task, all of its processes together (4GiB, 512MiB, 2GB); "
        "a task over it is killed. Enforced where the agent has a memory cgroup.",
    )

    @field_validator("memory")
    @classmethod
    def _memory_size(cls, value: str | None) -> str | None:
        if value is not None:
            size = parse_memory(value)
            if not MIN_TASK_MEMORY <= size <= MAX_TASK_MEMORY:
                raise ValueError(
                    f"memory must lie within {format_memory(MIN_TASK_MEMORY)} and "
                    f"{format_memory(MAX_TASK_MEMORY)}, got {value!r}"
                )
        return value

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory is None else parse_memory(self.memory)


class Replicas(_Strict):
    chief: ReplicaSpec = ReplicaSpec()
    worker: ReplicaSpec = ReplicaSpec()
    ps: ReplicaSpec = ReplicaSpec()
    evaluator: ReplicaSpec = ReplicaSpec()

    def of(self, role: Role) -> ReplicaSpec:
        spec: ReplicaSpec = getattr(self, role)
        return spec


class KeepBest(_Strict):
    metric: str = Field(
        pattern=METRIC_NAME_PATTERN, description="An epoch-end metric, e.g. loss or val_accuracy."
    )
    mode: Literal["min", "max"] = "min"


class CheckpointPolicy(_Strict):
    dir: str | None = Field(
        default=None, description="Relative to the checkpoint root; a per-job dir when null."
    )
    every_epochs: Annotated[int, Field(ge=1, le=1_000_000)] | None = 1
    every_seconds: Annotated[float, Field(gt=0, le=86_400 * 7)] | None = None
    keep: Annotated[int, Field(ge=1, le=1000, description="Checkpoints kept (latest).")] = 5
    keep_best: KeepBest | None = Field(
        default=None, description="Also keep the best checkpoint by this metric."
    )
    backup_every_seconds: Annotated[float, Field(ge=0, le=86_400)] = Field(
        default=30.0,
        description="The backup a restarted chief resumes from is written at an epoch end "
        "once this long has passed since the last one (0: every epoch). Each costs a save: "
        "on short epochs, every epoch would slow training down.",
    )

    warm_start_from: str | None = Field(
        default=None,
        description="An absolute checkpoint path (a prefix such as /ckpts/job-3/ckpt-8, or a "
        "dir: its latest) the model's weights and optimizer start from, when the task has no "
        "backup of its own to resume from. It may come from another strategy.",
    )

    @property
    def saves(self) -> bool:
        """Whether the runtime writes checkpoints on its own (checkpoint-now always can)."""
        return self.every_epochs is not None or self.every_seconds is not None

    @field_validator("dir")
    @classmethod
    def _confined(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _relative_path(value, "checkpoint.dir", "the checkpoint root")
        if not PurePosixPath(value).parts:
            raise ValueError(
                "checkpoint.dir must name a directory under the checkpoint root (other jobs' "
                f"dirs live in the root itself), got {value!r}; leave it null for a per-job dir"
            )
        return value

    @field_validator("warm_start_from")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        what = "checkpoint.warm_start_from"
        if _CONTROL.search(value):
            raise ValueError(f"{what} must not contain NUL or control characters, got {value!r}")
        if len(value) > MAX_PATH_CHARS:
            raise ValueError(
                f"{what} must be at most {MAX_PATH_CHARS} characters, got {len(value)}"
            )
        path = PurePosixPath(value)
        if not path.is_absolute():
            raise ValueError(
                f"{what} must be an absolute path (a checkpoint prefix or a checkpoint dir), "
                f"got {value!r}"
            )
        if ".." in path.parts or len(path.parts) < 2:
            raise ValueError(f"{what} must name a checkpoint, without '..' parts; got {value!r}")
        return value


SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")


class CodeRef(_Strict):
    """The code bundle a job runs in (see PUT /code/{sha256}); `strata submit` packs the
    spec's `code.dir` and sends this instead."""

    sha256: str = Field(description="The bundle's SHA-256: 64 lowercase hex characters.")

    @model_validator(mode="before")
    @classmethod
    def _no_dir(cls, value: Any) -> Any:
        if isinstance(value, dict) and "dir" in value:
            raise ValueError(
                "code.dir is read by `strata submit`, which uploads the dir as a bundle and "
                "sends code.sha256 instead; the server takes only code.sha256"
            )
        return value

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        if not SHA256_PATTERN.fullmatch(value):
            raise ValueError(f"must be a SHA-256: 64 lowercase hex characters, got {value[:80]!r}")
        return value


MIN_HANG_TIMEOUT = 10.0  # seconds: a shorter one would take a slow step for a hang


class RestartPolicy(_Strict):
    policy: Literal["never", "on_failure", "exit_code"] = "on_failure"
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    backoff_seconds: Annotated[float, Field(ge=0, le=3600)] = 2.0


class JobSpec(_Strict):
    """A distributed TensorFlow training job."""

    name: str = Field(description="Short and safe: letters, digits, '.', '_' and '-'.")
    strategy: Strategy
    entrypoint: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="argv, no shell. Required, except for a job whose coordinator is the "
        "client and has no evaluator (its workers and ps run Strata's server).",
    )
    coordinator: Literal["chief", "client"] = Field(
        default="chief",
        description="parameter_server only: who runs the training code. chief: the job's "
        "chief task; client: your own Python process (a notebook, a script anywhere), which "
        "attaches with runtime.connect(job) while the workers and ps serve.",
    )
    client_idle_timeout: Annotated[float, Field(gt=0, le=7 * 86400)] | None = Field(
        default=None,
        description="coordinator: client only: seconds the job waits with no client attached "
        "before it ends (null: the server's STRATA_CLIENT_IDLE_TIMEOUT).",
    )
    working_dir: str = Field(
        default=".", description="Under the agent's workspace, or under the code bundle's root."
    )
    code: CodeRef | None = Field(
        default=None, description="Run in this code bundle instead of the agent's workspace."
    )
    environment: RuntimeEnvironment | None = Field(
        default=None,
        description="Where every task runs: a container image (hosts with a container engine "
        "only) or an interpreter on the hosts; null for the agent's own interpreter.",
    )
    env: dict[str, str] = Field(default_factory=dict, max_length=256)
    warm_start: bool = Field(
        default=True,
        description="Start tasks in the agents' warm processes (TensorFlow already imported) "
        "where that is the same as a cold start; false: always a fresh interpreter.",
    )
    replicas: Replicas
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    restart: RestartPolicy = RestartPolicy()
    export: ExportOptions | None = Field(
        default=None,
        description="Export the trained model when fit ends successfully; {} for the defaults.",
    )
    strategy_options: StrategyOptions = StrategyOptions()
    priority: Annotated[int, Field(ge=-100, le=100, description="Higher is placed first.")] = 0
    hang_timeout: Annotated[float, Field(ge=0, le=7 * 86400)] | None = Field(
        default=None,
        description="Seconds a running job's step may stand still before it is declared hung: "
        "its stacks are collected into its logs and it restarts from its checkpoint. The first "
        "step's tracing, evaluation, checkpoint writes and export never count. null: "
        "max(STRATA_HANG_TIMEOUT, 5x the median recent step time); 0: never.",
    )
    stragglers: Literal["report", "restart"] = Field(
        default="report",
        description="A worker slower than 1.5x the median of its peers is flagged (report); "
        "restart also moves it to another host (parameter_server only).",
    )
    preemptible: bool | None = Field(
        default=None,
        description="Whether a pending job of higher priority that fits nowhere may interrupt "
        "this one to take its place (a checkpoint first; it then waits, pending, and no "
        "restart is counted); null: the server's STRATA_PREEMPTIBLE.",
    )
    project: str | None = Field(
        default=None,
        pattern=TEAM_NAME_PATTERN,
        description="The project it belongs to (you must be a member of it); null: your "
        "default project, or `default` for an admin token. Set to the project's name on "
        "submission.",
    )
    slurm: SlurmOptions | None = Field(
        default=None,
        description="Run as one Slurm job (the server's STRATA_SLURM_* settings); null: on "
        "Strata's own agents.",
    )
    description: str = Field(
        default="", max_length=MAX_DESCRIPTION, description="Free text about the job (searchable)."
    )
    tags: list[str] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description="Labels to find jobs by (GET /jobs?tag=): at most 16, each 1-32 letters, "
        "digits, '.', '_', '-', ':' or '=', starting with a letter or digit.",
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return safe_name(value)

    @field_validator("tags")
    @classmethod
    def _safe_tags(cls, value: list[str]) -> list[str]:
        for tag in value:
            if not TAG_PATTERN.fullmatch(tag):
                raise ValueError(
                    "each tag must be 1-32 characters of letters, digits, '.', '_', '-', ':' "
                    f"or '=', starting with a letter or digit; got {tag!r}"
                )
        if len(set(value)) != len(value):
            raise ValueError(f"tags must not repeat; got {value!r}")
        return value

    @field_validator("hang_timeout")
    @classmethod
    def _hang_timeout_not_too_short(cls, value: float | None) -> float | None:
        if value is not None and 0 < value < MIN_HANG_TIMEOUT:
            raise ValueError(
                f"must be 0 (no hang detection) or at least {MIN_HANG_TIMEOUT:g} seconds, "
                f"got {value:g}"
            )
        return value

    @field_validator("description")
    @classmethod
    def _printable_description(cls, value: str) -> str:
        if any(ord(c) < 32 and c not in "\n\t" for c in value):
            raise ValueError("must not hold control characters other than newlines and tabs")
        return value

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _argv_not_shell(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(
                "must be an argv list such as [python, train.py, --epochs, '5'], not a shell string"
            )
        return value

    @field_validator("entrypoint")
    @classmethod
    def _argv_items(cls, value: list[str]) -> list[str]:
        if value and not value[0].strip():
            raise ValueError("argv[0] (the program) must not be empty")
        for position, arg in enumerate(value):
            if "\x00" in arg:
                raise ValueError(f"argv[{position}] contains a NUL byte")
            if len(arg) > 4096:
                raise ValueError(f"argv[{position}] is longer than 4096 characters")
        return value

    @field_validator("working_dir")
    @classmethod
    def _confined_working_dir(cls, value: str) -> str:
        return _relative_path(value, "working_dir", "the agent's workspace")

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not ENV_KEY_PATTERN.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by Strata for every task and cannot be overridden")
            if "\x00" in item or len(item) > 32_768:
                raise ValueError(f"the value of {key} has a NUL byte or is over 32768 characters")
        return value

    @property
    def image(self) -> str | None:
        """The container image every task runs in, if any (placement needs an engine)."""
        return None if self.environment is None else self.environment.image

    def task_count(self, *, include_evaluator: bool = True) -> int:
        roles = ROLES if include_evaluator else TRAINING_ROLES
        return sum(self.replicas.of(role).count for role in roles)


def coordinator_issues(spec: JobSpec) -> list[FieldIssue]:
    """The rules of `coordinator` and `client_idle_timeout`, and when an entrypoint is needed."""
    issues: list[FieldIssue] = []
    client = spec.coordinator == "client"
    if client and spec.strategy != Strategy.parameter_server:
        why = (
            "multi_worker_mirrored has no client mode in TensorFlow 2: every worker runs the "
            "training code and takes part in each step"
            if spec.strategy == Strategy.multi_worker_mirrored
            else "mirrored is one process that trains itself"
        )
        issues.append(FieldIssue("coordinator", f"client is for parameter_server only: {why}"))
    if client and spec.replicas.chief.count:
        issues.append(
            FieldIssue(
                f"replicas.{Role.chief}.count",
                "a job whose coordinator is the client has no chief: the client that "
                "attaches with runtime.connect(job) is its coordinator; set it to 0",
            )
        )
    if spec.client_idle_timeout is not None and not client:
        issues.append(
            FieldIssue(
                "client_idle_timeout",
                "only a job whose coordinator is the client (coordinator: client) waits for one",
            )
        )
    runs_user_code = not client or spec.replicas.evaluator.count > 0
    if runs_user_code and not spec.entrypoint:
        whose = "the sidecar evaluator's" if client else "the training code's"
        issues.append(
            FieldIssue("entrypoint", f"is required: {whose} argv, e.g. [python, train.py]")
        )
    return issues


def strategy_issues(spec: JobSpec) -> list[FieldIssue]:
    """The rules that tie replica counts to the strategy (ARCHITECTURE §3)."""
    r = spec.replicas
    issues: list[FieldIssue] = []

    def need(ok: bool, role: Role, message: str) -> None:
        if not ok:
            issues.append(FieldIssue(f"replicas.{role}.count", message))

    issues.extend(coordinator_issues(spec))
    if spec.strategy == Strategy.parameter_server:
        if spec.coordinator == "chief":
            need(
                r.chief.count == 1,
                Role.chief,
                "parameter_server needs exactly one chief (the coordinator), or "
                "coordinator: client",
            )
        need(r.worker.count >= 1, Role.worker, "parameter_server needs at least one worker")
        need(r.ps.count >= 1, Role.ps, "parameter_server needs at least one ps")
    elif spec.strategy == Strategy.multi_worker_mirrored:
        need(r.worker.count >= 1, Role.worker, "multi_worker_mirrored needs at least one worker")
        need(r.ps.count == 0, Role.ps, "multi_worker_mirrored takes no ps")
        need(r.chief.count <= 1, Role.chief, "multi_worker_mirrored takes at most one chief")
    else:
        need(r.ps.count == 0, Role.ps, "mirrored takes no ps")
        if r.chief.count + r.worker.count != 1:
            issues.append(
                FieldIssue(
                    "replicas",
                    "mirrored is exactly one task: one chief or one worker, "
                    f"got {r.chief.count} chief and {r.worker.count} worker",
                )
            )
    options = spec.strategy_options
    if options.communication is not None and spec.strategy != Strategy.multi_worker_mirrored:
        issues.append(
            FieldIssue(
                "strategy_options.communication",
                "collective communication is an option of multi_worker_mirrored only; this "
                f"job is {spec.strategy}",
            )
        )
    if options.collective_timeout is not None and spec.strategy != Strategy.multi_worker_mirrored:
        issues.append(
            FieldIssue(
                "strategy_options.collective_timeout",
                "the collective timeout is an option of multi_worker_mirrored only; this job is "
                f"{spec.strategy}",
            )
        )
    if options.partitioner is not None and spec.strategy != Strategy.parameter_server:
        issues.append(
            FieldIssue(
                "strategy_options.partitioner",
                "the variable partitioner is an option of parameter_server only; this job is "
                f"{spec.strategy}",
            )
        )
    need(r.evaluator.count <= 1, Role.evaluator, "at most one sidecar evaluator")
    if spec.task_count() > MAX_TASKS_PER_JOB:
        issues.append(
            FieldIssue(
                "replicas", f"a job has at most {MAX_TASKS_PER_JOB} tasks, got {spec.task_count()}"
            )
        )
    return issues


def stored_spec(document: Mapping[str, Any]) -> JobSpec:
    """A stored spec (the JSON of `jobs.spec`) as the model. The rules were applied when it
    was submitted (`validate_spec`); reading it back is lax about types, as JSON is."""
    return JobSpec.model_validate(document, strict=False)


def validate_spec(data: object) -> JobSpec:
    """Validate a parsed document, raising InvalidInput with every problem found."""
    if not isinstance(data, dict):
        raise InvalidInput(
            [FieldIssue("", f"a job spec must be a mapping of fields, got {type(data).__name__}")]
        )
    unencodable = list(_unencodable_strings(data, ()))
    if unencodable:
        raise InvalidInput(unencodable)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput([_issue_from_pydantic(err) for err in exc.errors()]) from None
    issues = strategy_issues(spec)
    if issues:
        raise InvalidInput(issues)
    return spec


def _unencodable_strings(value: object, loc: tuple[int | str, ...]) -> Iterator[FieldIssue]:
    """Strings (keys included) that are not Unicode text: a JSON body may hold a lone
    surrogate ("\\ud800"), which no database, file name or argv can store."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            yield FieldIssue(dotted(loc), "must be valid Unicode text (it has a lone surrogate)")
    elif isinstance(value, dict):
        for key, item in value.items():
            at = (*loc, str(key).encode("utf-8", "replace").decode())
            yield from _unencodable_strings(key, at)
            yield from _unencodable_strings(item, at)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unencodable_strings(item, (*loc, index))


YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


def parse_spec_document(body: bytes, content_type: str | None) -> object:
    """Turn a request body into a document: JSON by default, YAML when the type says so."""
    media_type = (content_type or "application/json").split(";")[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput([FieldIssue("", "the body is not valid UTF-8")]) from None
    if media_type in YAML_TYPES:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidInput([FieldIssue("", f"the body is not valid YAML: {exc}")]) from None
    if media_type == "application/json" or media_type.endswith("+json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput([FieldIssue("", f"the body is not valid JSON: {exc}")]) from None
    raise UnsupportedMediaType(
        f"content type {media_type!r} is not accepted; send application/json or application/yaml"
    )


def _issue_from_pydantic(err: Any) -> FieldIssue:
    loc = tuple(err["loc"])
    message = str(err["msg"])
    if err["type"] == "extra_forbidden":
        allowed = _fields_at(loc[:-1])
        message = (
            f"unknown field; expected one of: {', '.join(allowed)}" if allowed else "unknown field"
        )
    elif err["type"] == "missing":
        message = "this field is required"
    elif message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    return FieldIssue(dotted(loc), message)


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The field names a (nested) model at loc accepts, for 'unknown field' messages."""
    model: Any = JobSpec
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        model = _model_in(field.annotation)
        if model is None:
            return []
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
