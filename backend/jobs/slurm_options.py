"""The job spec's `slurm:` section: where and how the job's Slurm job is submitted.

Strata decides the shape of the allocation (nodes, one agent per node, GPUs per node as GRES,
the job's name and comment); the user picks where it runs (partition, account, QOS, time
limit, constraint) and may add sbatch options from an allow-list that cannot change that shape.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

# sbatch options a spec may add (long names only). Options that set what Strata decides
# (--nodes, --ntasks*, --gres, --gpus*, --job-name, --comment, --output, --array, ...) and
# those with their own field (--partition, --account, --qos, --time, --constraint) are out.
ALLOWED_SBATCH_OPTIONS: tuple[str, ...] = (
    "--begin",
    "--cpus-per-task",
    "--exclude",
    "--exclusive",
    "--gres-flags",
    "--hint",
    "--licenses",
    "--mail-type",
    "--mail-user",
    "--mem",
    "--mem-per-cpu",
    "--mem-per-gpu",
    "--nice",
    "--nodelist",
    "--no-requeue",
    "--requeue",
    "--reservation",
    "--signal",
    "--switches",
    "--tmp",
    "--wckey",
)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,-]{0,127}")  # partitions (a list), accounts, QOS
# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; or UNLIMITED.
TIME_LIMIT = re.compile(r"(?:\d{1,5}(?::\d{1,2}){0,2}|\d{1,4}-\d{1,2}(?::\d{1,2}){0,2}|UNLIMITED)")
OPTION = re.compile(r"(?P<name>--[a-z][a-z-]*)(?:=(?P<value>.+))?", re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SlurmOptions(BaseModel):
    """Run this job as one Slurm job (the server's Slurm settings say how to reach Slurm)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    partition: str | None = Field(
        default=None, description="The partition; the server's default partition when null."
    )
    account: str | None = Field(
        default=None, description="The account charged; the server's default when null."
    )
    qos: str | None = Field(default=None, description="The quality of service.")
    time_limit: str | None = Field(
        default=None,
        description="Slurm's --time: minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED.",
    )
    constraint: str | None = Field(
        default=None, max_length=256, description="Node features (Slurm's --constraint)."
    )
    nodes: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        default=None,
        description="Nodes to ask for; one per task that uses GPUs when null (at least one).",
    )
    sbatch_options: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="More sbatch options, as --name or --name=value, from: "
        + ", ".join(ALLOWED_SBATCH_OPTIONS)
        + ".",
    )

    @field_validator("partition", "account", "qos")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not NAME.fullmatch(value):
            raise ValueError(
                "must be 1-128 characters of letters, digits, '_', '.', ',' or '-', starting "
                f"with a letter or digit; got {value[:140]!r}"
            )
        return value

    @field_validator("time_limit")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        if value is not None and not TIME_LIMIT.fullmatch(value):
            raise ValueError(
                "must be a Slurm time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                f"D-HH:MM:SS or UNLIMITED; got {value[:40]!r}"
            )
        return value

    @field_validator("constraint")
    @classmethod
    def _constraint(cls, value: str | None) -> str | None:
        if value is not None and (not value or _CONTROL.search(value) or value.startswith("-")):
            raise ValueError(
                f"must be a Slurm constraint expression (no control characters), got {value!r}"
            )
        return value

    @field_validator("sbatch_options")
    @classmethod
    def _allowed(cls, value: list[str]) -> list[str]:
        for position, option in enumerate(value):
            found = OPTION.fullmatch(option)
            if found is None or found["name"] not in ALLOWED_SBATCH_OPTIONS:
                raise ValueError(
                    f"sbatch_options[{position}] {option[:80]!r} is not allowed; allowed "
                    f"(as --name or --name=value): {', '.join(ALLOWED_SBATCH_OPTIONS)}"
                )
            if _CONTROL.search(option) or len(option) > 1024:
                raise ValueError(
                    f"sbatch_options[{position}] must be at most 1024 characters without "
                    "control characters"
                )
        return value
