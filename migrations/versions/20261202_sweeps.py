"""sweeps and sweep_trials; on PostgreSQL the schema that holds Optuna's own tables

Revision ID: 7d1f3b9e2c48
Revises: 5c2e8a4f1d93
Create Date: 2026-12-02 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7d1f3b9e2c48"
down_revision: str | None = "5c2e8a4f1d93"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Optuna migrates its tables with alembic too: in a schema of their own its version table
# cannot be taken for this one (backend.sweeps.study).
OPTUNA_SCHEMA = "optuna"


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("submitted_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_sweeps_project_id_projects")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
    )
    op.create_index(op.f("ix_sweeps_name"), "sweeps", ["name"])
    op.create_index(op.f("ix_sweeps_status"), "sweeps", ["status"])
    op.create_index(op.f("ix_sweeps_project_id"), "sweeps", ["project_id"])
    op.create_table(
        "sweep_trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("curve", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweeps.id"],
            name=op.f("fk_sweep_trials_sweep_id_sweeps"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_sweep_trials_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_trials")),
        sa.UniqueConstraint("sweep_id", "number", name=op.f("uq_sweep_trials_sweep_id_number")),
        sa.UniqueConstraint("job_id", name=op.f("uq_sweep_trials_job_id")),
    )
    op.create_index(op.f("ix_sweep_trials_sweep_id"), "sweep_trials", ["sweep_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {OPTUNA_SCHEMA}")


def downgrade() -> None:
    op.drop_table("sweep_trials")
    op.drop_table("sweeps")
