"""metric values may be NaN

Revision ID: 825f5701b814
Revises: f4e8c2889514
Create Date: 2026-11-22 09:09:40.816932
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "825f5701b814"
down_revision: str | None = "f4e8c2889514"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.alter_column("value", existing_type=sa.FLOAT(), nullable=True)


def downgrade() -> None:
    # The old schema cannot hold them: NaN points are dropped on the way down.
    op.execute("DELETE FROM metric_points WHERE value IS NULL")
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.alter_column("value", existing_type=sa.FLOAT(), nullable=False)
