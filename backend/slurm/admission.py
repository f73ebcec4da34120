"""Checks a job that asks for Slurm before it is stored: a 422 with Slurm's own message.

`sbatch --test-only` asks slurmctld whether it would take the job as Strata would submit it
(partition, account, QOS, GRES, the spec's sbatch options) without submitting anything. When
Slurm cannot be reached the job is accepted: the backend submits it once Slurm answers.
"""

from __future__ import annotations

import logging

from backend.config import Settings
from backend.errors import FieldIssue, InvalidInput
from backend.jobs.spec import JobSpec
from backend.slurm.commands import SlurmCommands, SlurmError, SlurmUnavailable
from backend.slurm.script import ShapeError, batch_script, sbatch_options
from backend.slurm.submit import server_url

log = logging.getLogger(__name__)

# What --test-only says of a job no node can take *now*, though sbatch itself would accept
# it and leave it pending (more nodes than the partition has: "PartitionConfig"). Slurm's
# sbatch decides those; the job then waits with Slurm's reason, or fails with its refusal.
NOT_A_REFUSAL = ("Requested node configuration is not available",)


async def admit(
    spec: JobSpec,
    *,
    settings: Settings,
    commands: SlurmCommands | None,
    project_account: str | None = None,
) -> None:
    """Raise InvalidInput (422) if this server cannot run the job on Slurm, or Slurm refuses it
    (with the account it would be charged to: see sbatch_options)."""
    if spec.slurm is None:
        return
    if not settings.slurm_enabled or commands is None:
        raise InvalidInput(
            [
                FieldIssue(
                    "slurm",
                    "this server runs no Slurm backend: its administrator enables it with "
                    "STRATA_SLURM_ENABLED=1 (see docs/slurm.md)",
                )
            ]
        )
    try:
        options = sbatch_options(
            settings=settings,
            job_id=0,
            spec=spec,
            name="strata-admission",
            marker="admission",
            project_account=project_account,
        )
    except ShapeError as exc:
        raise InvalidInput([FieldIssue("slurm.nodes", str(exc))]) from None
    script = batch_script(settings=settings, job_id=0, server_url=server_url(settings))
    try:
        await commands.test_submit(script, options)
    except SlurmUnavailable as exc:
        log.warning("cannot ask Slurm about a new job (%s); accepting it", exc.message)
    except SlurmError as exc:
        if any(phrase in exc.message for phrase in NOT_A_REFUSAL):
            return
        raise InvalidInput(
            [FieldIssue("slurm", f"Slurm refuses this job: {exc.message}")]
        ) from None
