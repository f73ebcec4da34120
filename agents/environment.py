"""The environment of a task: every variable Strata sets for a training process, in one model.

The server builds it for a start message, the agent adds what only it knows (how the task
reaches the server, the CA it trusts), and the runtime reads it back. Each variable's name
is written here once, as the alias of its field. A script run by hand has none of them, so
every field may be None; a variable that is set must be well formed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from agents.tls import CA_FILE_ENV
from agents.vocabulary import Strategy, TaskName


class TaskEnvironmentError(ValueError):
    """A task variable that is set but cannot be read; the message names each one."""


def _blank_is_unset(value: object) -> object:
    # Readers have always ignored surrounding blanks and treated an empty value as unset.
    if isinstance(value, str):
        value = value.strip()
        return value or None
    return value


_Text = Annotated[str | None, BeforeValidator(_blank_is_unset)]
_Integer = Annotated[int | None, BeforeValidator(_blank_is_unset)]


class TaskEnvironment(BaseModel):
    """What Strata tells a task through its environment (None: not set)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True
    )

    # TensorFlow's own: the cluster and this task's place in it, as JSON.
    tf_config: _Text = Field(default=None, alias="TF_CONFIG")
    # CUDA's own syntax (a script run by hand may give UUIDs, or -1): the agent gives the
    # task's device indices joined by commas, and "" to hide every GPU (see `device_list`).
    visible_devices: str | None = Field(default=None, alias="CUDA_VISIBLE_DEVICES")
    # The server's URL as the agent reaches it (the agent sets it, not the server).
    server: _Text = Field(default=None, alias="STRATA_SERVER")
    job_id: Annotated[_Integer, Field(ge=1)] = Field(default=None, alias="STRATA_JOB_ID")
    task: Annotated[TaskName | None, BeforeValidator(_blank_is_unset)] = Field(
        default=None, alias="STRATA_TASK"
    )
    attempt: Annotated[_Integer, Field(ge=0)] = Field(default=None, alias="STRATA_ATTEMPT")
    strategy: Annotated[Strategy | None, BeforeValidator(_blank_is_unset)] = Field(
        default=None, alias="STRATA_STRATEGY"
    )
    task_token: _Text = Field(default=None, alias="STRATA_TASK_TOKEN")  # scoped to the job
    checkpoint_dir: _Text = Field(default=None, alias="STRATA_CHECKPOINT_DIR")
    # The spec's checkpoint policy less its dir, as JSON (agents.runtime.checkpoint_policy).
    checkpoint_policy: _Text = Field(default=None, alias="STRATA_CHECKPOINT_POLICY")
    # The spec's `export` as JSON (agents.options.ExportOptions); unset: no export.
    export: _Text = Field(default=None, alias="STRATA_EXPORT")
    # The spec's `strategy_options` as JSON (agents.options.StrategyOptions).
    strategy_options: _Text = Field(default=None, alias="STRATA_STRATEGY_OPTIONS")
    # The spec's checkpoint.warm_start_from: an absolute checkpoint prefix or dir whose
    # weights a task without a backup of its own starts from (agents.runtime.warm_start).
    warm_start_from: _Text = Field(default=None, alias="STRATA_WARM_START_FROM")
    # Set in a client coordinator (runtime.connect): its session with the job. Its backups
    # outlive fit, so that the next client resumes from them.
    client_session: Annotated[_Integer, Field(ge=1)] = Field(
        default=None, alias="STRATA_CLIENT_SESSION"
    )
    # The CA the agent trusts for the server, so that the runtime trusts the same one.
    ca_file: _Text = Field(default=None, alias=CA_FILE_ENV)
    # gRPC's failure mode for calls to a dead peer.
    grpc_fail_fast: _Text = Field(default=None, alias="GRPC_FAIL_FAST")
    # "1": tf.keras is tf_keras (see `prefer_tf_keras`).
    legacy_keras: _Text = Field(default=None, alias="TF_USE_LEGACY_KERAS")
    # Where the runtime writes why it stopped the task for good (see agents.runtime.refusal);
    # the agent sets it per attempt and reads it back when the process exits.
    termination_file: _Text = Field(default=None, alias="STRATA_TERMINATION_FILE")
    # Set while the agent gives notice before it stops: a file the agent creates just before
    # it stops the attempt. A SIGTERM that comes while it does not exist is someone else's
    # (Slurm and systemd signal every process of the agent's, not the agent alone), and the
    # runtime lets the agent checkpoint and stop the task instead (agents.runtime.stop_signals).
    stop_file: _Text = Field(default=None, alias="STRATA_STOP_FILE")
    # The signal on which the runtime dumps every thread's Python stack to stderr (the agent
    # asks a hung task for its stacks with it: agents.host.stacks).
    stacks_signal: Annotated[_Integer, Field(ge=1, le=127)] = Field(
        default=None, alias="STRATA_STACKS_SIGNAL"
    )
    # "<agent namespace>/<attempt>": how an agent without cgroups finds an attempt's processes
    # (agents.host.containment), and how a restarted one finds what its predecessor left.
    containment: _Text = Field(default=None, alias="STRATA_CONTAINMENT")

    @staticmethod
    def device_list(gpus: Iterable[int]) -> str:
        """CUDA_VISIBLE_DEVICES for these device indices (none: "", which hides every GPU)."""
        return ",".join(str(index) for index in gpus)

    @classmethod
    def variable(cls, field: str) -> str:
        """The environment variable a field is read from and written to."""
        alias = cls.model_fields[field].alias
        assert alias is not None, field
        return alias

    @classmethod
    def variables(cls) -> frozenset[str]:
        return frozenset(cls.variable(field) for field in cls.model_fields)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TaskEnvironment:
        """The task variables in ``env`` (os.environ, or a start message's env); others are
        ignored. Raises TaskEnvironmentError naming every variable that is set but bad."""
        present = {name: env[name] for name in cls.variables() if name in env}
        try:
            return cls.model_validate(present)
        except ValidationError as exc:
            raise TaskEnvironmentError(_describe(exc, present)) from None

    def to_env(self) -> dict[str, str]:
        """The variables that are set, as strings; unset ones are left out."""
        values = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {name: str(value) for name, value in values.items()}


def _describe(exc: ValidationError, present: Mapping[str, str]) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        name = str(error["loc"][0]) if error["loc"] else "?"
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{name}={present.get(name, '')!r}: {message}")
    return "; ".join(problems)


def prefer_tf_keras(environ: MutableMapping[str, str]) -> None:
    """Make tf.keras mean tf_keras unless the process chose otherwise.

    Keras 3 cannot run `fit` under ParameterServerStrategy or MultiWorkerMirroredStrategy and
    has no SidecarEvaluator; the choice only counts before TensorFlow is imported.
    """
    environ.setdefault(TaskEnvironment.variable("legacy_keras"), "1")
