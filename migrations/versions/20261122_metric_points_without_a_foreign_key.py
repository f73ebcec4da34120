"""metric points without a foreign key

Revision ID: bbfda6edfec5
Revises: a9f1b0a2a711
Create Date: 2026-11-22 10:20:13.256326
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "bbfda6edfec5"
down_revision: str | None = "a9f1b0a2a711"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_metric_points_job_id_jobs"), type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.create_foreign_key(
            batch_op.f("fk_metric_points_job_id_jobs"),
            "jobs",
            ["job_id"],
            ["id"],
            ondelete="CASCADE",
        )
