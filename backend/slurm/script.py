"""What sbatch is given for a job: its options (the allocation's shape) and its batch script.

The allocation has one Strata agent per node (`--ntasks-per-node=1`), each bound to this job;
GPUs are asked for per node as GRES. Strata then places the job's tasks on those agents as it
does on its own hosts. Nodes: the spec's `slurm.nodes`, or one per task that uses GPUs; GPUs
per node: the fewest that hold the job's GPU tasks on that many nodes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from backend.config import Settings
from backend.jobs.spec import ROLES, JobSpec

MAX_GPUS_PER_NODE = 64


class ShapeError(ValueError):
    """The job's GPU tasks cannot be held by the nodes its spec asks for."""


@dataclass(frozen=True)
class Shape:
    nodes: int
    gpus_per_node: int


def _fits(gpu_tasks: list[int], nodes: int, per_node: int) -> bool:
    """First fit, largest first: whether these tasks' GPUs fit on the nodes."""
    free = [per_node] * nodes
    for need in sorted(gpu_tasks, reverse=True):
        for position, left in enumerate(free):
            if left >= need:
                free[position] -= need
                break
        else:
            return False
    return True


def allocation_shape(spec: JobSpec) -> Shape:
    """How many nodes, with how many GPUs each, the job's Slurm job asks for."""
    gpu_tasks = [
        spec.replicas.of(role).gpus
        for role in ROLES
        for _ in range(spec.replicas.of(role).count)
        if spec.replicas.of(role).gpus > 0
    ]
    asked = spec.slurm.nodes if spec.slurm is not None else None
    nodes = asked if asked is not None else max(1, len(gpu_tasks))
    if not gpu_tasks:
        return Shape(nodes, 0)
    for per_node in range(max(gpu_tasks), MAX_GPUS_PER_NODE + 1):
        if _fits(gpu_tasks, nodes, per_node):
            return Shape(nodes, per_node)
    raise ShapeError(
        f"{len(gpu_tasks)} tasks using {sum(gpu_tasks)} GPUs do not fit on {nodes} nodes of at "
        f"most {MAX_GPUS_PER_NODE} GPUs each; ask for more nodes (slurm.nodes)"
    )


@dataclass(frozen=True)
class Submission:
    """An sbatch call: its options, the script on its stdin, and what its environment adds."""

    options: list[str]
    script: str
    env: dict[str, str]


def job_name(settings: Settings, job_id: int) -> str:
    return f"{settings.slurm_job_prefix}-{job_id}"


def sbatch_options(
    *,
    settings: Settings,
    job_id: int,
    spec: JobSpec,
    name: str,
    marker: str,
    project_account: str | None = None,
) -> list[str]:
    """Everything sbatch is told on its command line for this job. Its account is the spec's,
    else its project's Slurm account, else the server's default."""
    slurm = spec.slurm
    assert slurm is not None, "only jobs with a slurm section run on Slurm"
    shape = allocation_shape(spec)
    output = (
        f"{settings.slurm_output_dir}/{name}-%j.out"
        if settings.slurm_output_dir is not None
        else "/dev/null"
    )
    options = [
        f"--job-name={name}",
        f"--comment={marker}",
        f"--nodes={shape.nodes}",
        "--ntasks-per-node=1",
        f"--output={output}",
        # A preempted or failed node's job comes back (requeued) and resumes from its backup.
        "--requeue",
    ]
    if shape.gpus_per_node:
        options.append(f"--gres=gpu:{shape.gpus_per_node}")
    if settings.slurm_workdir is not None:
        options.append(f"--chdir={settings.slurm_workdir}")
    partition = slurm.partition or settings.slurm_partition
    account = slurm.account or project_account or settings.slurm_account
    for flag, value in (
        ("--partition", partition),
        ("--account", account),
        ("--qos", slurm.qos),
        ("--time", slurm.time_limit),
        ("--constraint", slurm.constraint),
    ):
        if value is not None:
            options.append(f"{flag}={value}")
    # The spec's own options last: sbatch takes the last of a repeated option.
    options.extend(slurm.sbatch_options)
    return options


def batch_script(*, settings: Settings, job_id: int, server_url: str) -> str:
    """The batch script: one agent per node with srun, joining with the job's agent token.

    The token comes in the environment (STRATA_AGENT_TOKEN, set for sbatch by the server),
    never in the script, which Slurm keeps and shows to its admins; the server binds the agent
    to the job the token names. Each agent is named after its node, which only the task
    itself knows (SLURMD_NODENAME): hence the small sh -c. On a node with NVIDIA's driver the
    agent finds the GPUs Slurm gave it through NVML, limited to its CUDA_VISIBLE_DEVICES; on
    one without (a test cluster's device files) it declares SLURM_GPUS_ON_NODE simulated ones,
    with the allocation's indices.
    """
    argv = [
        *shlex.split(settings.slurm_agent_command),
        "--server",
        server_url,
        "--notice",
        f"{settings.slurm_agent_notice_seconds:g}",
    ]
    node_name = f"{settings.slurm_job_prefix}-{job_id}-$SLURMD_NODENAME"
    per_node = shlex.quote(
        f'if command -v nvidia-smi >/dev/null; then exec "$@" --name "{node_name}"; fi; '
        f'exec "$@" --name "{node_name}" --gpus "${{SLURM_GPUS_ON_NODE:-0}}"'
    )
    agent = " ".join(shlex.quote(arg) for arg in argv)
    return "\n".join(
        [
            "#!/bin/bash",
            f"# Strata job {job_id}: one Strata agent per node of this allocation, bound to",
            "# the job; the server places the job's tasks on them. Generated by the server.",
            "set -euo pipefail",
            ': "${STRATA_AGENT_TOKEN:?the server passes the job agent token in the environment}"',
            # --kill-on-bad-exit: one agent failing ends the step, and with it the job's
            # processes; nothing of the job outlives the allocation.
            f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c {per_node} sh {agent}",
            "",
        ]
    )
