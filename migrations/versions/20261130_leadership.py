"""leadership: the lease one server replica holds to lead, with its epoch

Revision ID: 3b9d7e1f5a60
Revises: 8e3d1f5a7c42
Create Date: 2026-11-30 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3b9d7e1f5a60"
down_revision: str | None = "8e3d1f5a7c42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # No row yet: the first replica to lead inserts it (backend.leadership.statements).
    op.create_table(
        "leadership",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_leadership_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leadership")),
    )


def downgrade() -> None:
    op.drop_table("leadership")
