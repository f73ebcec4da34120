"""slurm jobs: each Slurm job a Strata job runs as, recorded before sbatch runs

Revision ID: 5e3a8c1f9b20
Revises: 2c7e9b4d1a63
Create Date: 2026-11-24 02:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5e3a8c1f9b20"
down_revision: str | None = "2c7e9b4d1a63"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "slurm_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("marker", sa.String(length=128), nullable=False),
        sa.Column(
            "phase",
            sa.Enum("recorded", "submitted", "ended", name="phase", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("slurm_job_id", sa.String(length=32), nullable=True),
        sa.Column("slurm_state", sa.String(length=32), nullable=True),
        sa.Column("slurm_reason", sa.Text(), nullable=True),
        sa.Column("nodes", sa.String(length=1024), nullable=True),
        sa.Column("submit_tries", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_slurm_jobs_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_slurm_jobs")),
    )
    with op.batch_alter_table("slurm_jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_slurm_jobs_job_id"), ["job_id"], unique=True)
        batch_op.create_index(batch_op.f("ix_slurm_jobs_phase"), ["phase"], unique=False)
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slurm_job_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("slurm_job_id")
    with op.batch_alter_table("slurm_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_slurm_jobs_phase"))
        batch_op.drop_index(batch_op.f("ix_slurm_jobs_job_id"))
    op.drop_table("slurm_jobs")
