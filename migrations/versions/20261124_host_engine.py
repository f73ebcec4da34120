"""host engine: the container engine a host's agent can start tasks in

Revision ID: 2c7e9b4d1a63
Revises: 6f1d2a8c4e57
Create Date: 2026-11-24 01:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2c7e9b4d1a63"
down_revision: str | None = "6f1d2a8c4e57"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Null for hosts that joined before: their next hello says whether they have one.
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("engine", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_column("engine")
