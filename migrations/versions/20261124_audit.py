"""audit: who changed what through the API (audit_entries), and who caused each job event

Revision ID: 8b2d4f6a0c35
Revises: 7a1c3e5f9b24
Create Date: 2026-11-24 05:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8b2d4f6a0c35"
down_revision: str | None = "7a1c3e5f9b24"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_entries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("target", sa.String(length=256), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_entries")),
    )
    with op.batch_alter_table("audit_entries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_entries_action"), ["action"], unique=False)
        batch_op.create_index("ix_audit_entries_job_id_id", ["job_id", "id"], unique=False)
        batch_op.create_index("ix_audit_entries_project_id_id", ["project_id", "id"], unique=False)
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("actor", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_column("actor")
    with op.batch_alter_table("audit_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_entries_project_id_id")
        batch_op.drop_index("ix_audit_entries_job_id_id")
        batch_op.drop_index(batch_op.f("ix_audit_entries_action"))
    op.drop_table("audit_entries")
