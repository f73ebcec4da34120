"""host identity: the agent identity that holds a host's name

Revision ID: 6f1d2a8c4e57
Revises: 9e4a6c2d7b13
Create Date: 2026-11-23 22:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "6f1d2a8c4e57"
down_revision: str | None = "9e4a6c2d7b13"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Null for hosts that joined before: the next hello from their name records one.
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("identity", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_column("identity")
