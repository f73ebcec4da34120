"""What an agent runs for a task: its argv, working dir and environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.protocol import StartTask, TaskKey
from backend.jobs.spec import JobSpec

# Under parameter_server the ps and worker tasks run no user code: the runtime serves them.
RUNTIME_SERVER_ARGV = ("python", "-m", "agents.runtime.server")


def task_argv(spec: JobSpec, role: str) -> list[str]:
    if spec.strategy == "parameter_server" and role in ("ps", "worker"):
        return list(RUNTIME_SERVER_ARGV)
    return list(spec.entrypoint)


def checkpoint_dir(spec: JobSpec, job_id: int, root: Path) -> Path:
    return root / (spec.checkpoint.dir or f"job-{job_id}")


def start_message(
    *,
    spec: JobSpec,
    key: TaskKey,
    port: int,
    gpus: list[int],
    tf_config: dict[str, Any],
    task_token: str,
    checkpoint_root: Path,
) -> StartTask:
    role = key.task.split(":")[0]
    env = {
        **spec.env,
        "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
        # An empty list hides every GPU: a task gets exactly the devices it was given.
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
        "STRATA_JOB_ID": str(key.job_id),
        "STRATA_TASK": key.task,
        "STRATA_ATTEMPT": str(key.attempt),
        "STRATA_STRATEGY": spec.strategy,
        "STRATA_TASK_TOKEN": task_token,
        "STRATA_CHECKPOINT_DIR": str(checkpoint_dir(spec, key.job_id, checkpoint_root)),
        # every_epochs, every_seconds, keep, keep_best: read by agents.runtime.checkpoints.
        "STRATA_CHECKPOINT_POLICY": spec.checkpoint.model_dump_json(exclude={"dir"}),
        # Fail RPCs to a dead peer at once so the coordinator can reschedule its closures.
        "GRPC_FAIL_FAST": "use_caller",
        "TF_USE_LEGACY_KERAS": "1",
    }
    return StartTask(
        key=key,
        argv=task_argv(spec, role),
        working_dir="."
        if tuple(task_argv(spec, role)) == RUNTIME_SERVER_ARGV
        else spec.working_dir,
        env=env,
        port=port,
        gpus=gpus,
    )
