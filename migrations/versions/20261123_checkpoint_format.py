"""checkpoint format and keras

Revision ID: 9e4a6c2d7b13
Revises: 3b8d51f0c6e2
Create Date: 2026-11-23 22:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9e4a6c2d7b13"
down_revision: str | None = "3b8d51f0c6e2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Every checkpoint stored before was a tf.train.Checkpoint (which Keras wrote it, unknown).
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "format", sa.String(length=16), nullable=False, server_default="tf_checkpoint"
            )
        )
        batch_op.add_column(sa.Column("keras", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_column("keras")
        batch_op.drop_column("format")
