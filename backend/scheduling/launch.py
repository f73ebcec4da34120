"""What an agent runs for a task: its argv, working dir and environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_core import to_json

from agents.environment import TaskEnvironment
from agents.options import StrategyOptions
from agents.protocol import StartTask, TaskKey
from agents.runtime_environment import RuntimeEnvironment
from agents.vocabulary import Role, Strategy, TaskName
from backend.jobs.spec import JobSpec

# Under parameter_server the ps and worker tasks run no user code: the runtime serves them.
RUNTIME_SERVER_ARGV = ("python", "-m", "agents.runtime.server")
WATCHDOG_VARIABLE = "TF_CLUSTER_COORDINATOR_WATCH_DOG_TIMEOUT"  # whole seconds


def runs_runtime_server(spec: JobSpec, role: Role) -> bool:
    return spec.strategy == Strategy.parameter_server and role in (Role.ps, Role.worker)


def task_argv(spec: JobSpec, role: Role) -> list[str]:
    return list(RUNTIME_SERVER_ARGV) if runs_runtime_server(spec, role) else list(spec.entrypoint)


def checkpoint_dir(spec: JobSpec, job_id: int, root: Path) -> Path:
    return root / (spec.checkpoint.dir or f"job-{job_id}")


def watchdog(spec: JobSpec, default_hang_timeout: float) -> dict[str, str]:
    """TensorFlow's own stall report under parameter_server: the coordinator dumps its stacks
    to stdout (into the chief's log) when no closure finished for the job's hang timeout. One
    idle thread; the spec's env may set it otherwise."""
    timeout = spec.hang_timeout if spec.hang_timeout is not None else default_hang_timeout
    if spec.strategy != Strategy.parameter_server or timeout <= 0:
        return {}
    return {WATCHDOG_VARIABLE: str(max(1, round(timeout)))}


@dataclass(frozen=True)
class JobLaunch:
    """What the start messages of one job's tasks share, worked out once for all of them
    rather than per task (a pass placing a hundred jobs builds a thousand messages)."""

    spec: JobSpec
    # The job's own variables, then Strata's for the whole job (Strata's win; the spec
    # refuses most of them anyway).
    env: dict[str, str]

    @classmethod
    def of(
        cls,
        *,
        spec: JobSpec,
        job_id: int,
        task_token: str,
        checkpoint_root: Path,
        hang_timeout: float = 0.0,
    ) -> JobLaunch:
        """`hang_timeout`: the server's default, for a spec that leaves it unset."""
        shared = TaskEnvironment(
            job_id=job_id,
            strategy=spec.strategy,
            task_token=task_token,
            checkpoint_dir=str(checkpoint_dir(spec, job_id, checkpoint_root)),
            # every_epochs, every_seconds, keep, keep_best: read by agents.runtime.checkpoints.
            checkpoint_policy=spec.checkpoint.model_dump_json(exclude={"dir", "warm_start_from"}),
            warm_start_from=spec.checkpoint.warm_start_from,
            # Read by agents.runtime.export and agents.runtime.strategy (agents.options).
            export=spec.export.model_dump_json() if spec.export is not None else None,
            strategy_options=(
                spec.strategy_options.model_dump_json(exclude_none=True)
                if spec.strategy_options != StrategyOptions()
                else None
            ),
            # Fail RPCs to a dead peer at once so the coordinator can reschedule its closures.
            grpc_fail_fast="use_caller",
            # tf.keras is tf_keras: Keras 3 cannot fit under the multi-worker strategies.
            legacy_keras="1",
        )
        return cls(spec=spec, env={**watchdog(spec, hang_timeout), **spec.env, **shared.to_env()})

    def environment(
        self, *, key: TaskKey, gpus: list[int], tf_config: dict[str, Any]
    ) -> dict[str, str]:
        """Everything the server tells this task; the agent adds where the server is."""
        own = TaskEnvironment(
            # Compact, keys in order: what json.dumps(separators=(",", ":")) writes, 5x faster.
            tf_config=to_json(tf_config).decode(),
            # An empty list hides every GPU: a task gets exactly the devices it was given.
            visible_devices=TaskEnvironment.device_list(gpus),
            task=TaskName.parse(key.task),
            attempt=key.attempt,
        )
        return {**self.env, **own.to_env()}

    def start_message(
        self, *, key: TaskKey, port: int, gpus: list[int], tf_config: dict[str, Any]
    ) -> StartTask:
        spec = self.spec
        role = TaskName.parse(key.task).role
        runtime_server = runs_runtime_server(spec, role)
        return StartTask(
            key=key,
            argv=task_argv(spec, role),
            # The runtime server needs none of the job's files.
            working_dir="." if runtime_server else spec.working_dir,
            env=self.environment(key=key, gpus=gpus, tf_config=tf_config),
            port=port,
            gpus=gpus,
            memory_limit=spec.replicas.of(role).memory_bytes,
            code_sha256=spec.code.sha256 if spec.code is not None and not runtime_server else None,
            # Every task runs in it, the runtime's own servers too: the image brings the
            # TensorFlow they serve variables with.
            # `environment: {}` is the agent's own interpreter, as no environment is.
            environment=spec.environment if spec.environment != RuntimeEnvironment() else None,
            warm_start=spec.warm_start,
        )
