"""checkpoint trigger

Revision ID: 5d2e7c41b9f0
Revises: bbfda6edfec5
Create Date: 2026-11-22 11:50:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5d2e7c41b9f0"
down_revision: str | None = "bbfda6edfec5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("trigger", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_column("trigger")
