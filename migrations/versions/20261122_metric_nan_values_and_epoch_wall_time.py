"""metric values may be NaN and wall time is epoch seconds

Revision ID: c4404431c578
Revises: f4e8c2889514
Create Date: 2026-11-22 09:22:34.767454
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c4404431c578"
down_revision: str | None = "f4e8c2889514"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("metric_points", "value", existing_type=sa.FLOAT(), nullable=True)
        op.alter_column(
            "metric_points",
            "wall_time",
            existing_type=sa.DateTime(timezone=True),
            type_=sa.Double(),
            postgresql_using="extract(epoch from wall_time)",
        )
        return
    # SQLite keeps timestamps as text, and a batch copy would CAST '2026-11-22 ...' to 2026.0:
    # convert through a new column instead.
    with op.batch_alter_table("metric_points") as batch_op:
        batch_op.add_column(sa.Column("wall_time_epoch", sa.Double(), nullable=True))
    op.execute(
        "UPDATE metric_points SET wall_time_epoch = (julianday(wall_time) - 2440587.5) * 86400.0"
    )
    with op.batch_alter_table("metric_points") as batch_op:
        batch_op.drop_column("wall_time")
        batch_op.alter_column(
            "wall_time_epoch",
            new_column_name="wall_time",
            existing_type=sa.Double(),
            nullable=False,
        )
        # NULL stands for NaN from now on.
        batch_op.alter_column("value", existing_type=sa.FLOAT(), nullable=True)


def downgrade() -> None:
    # The old schema cannot hold NaN: those points are dropped on the way down.
    op.execute("DELETE FROM metric_points WHERE value IS NULL")
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "metric_points",
            "wall_time",
            existing_type=sa.Double(),
            type_=sa.DateTime(timezone=True),
            postgresql_using="to_timestamp(wall_time)",
        )
        op.alter_column("metric_points", "value", existing_type=sa.FLOAT(), nullable=False)
        return
    with op.batch_alter_table("metric_points") as batch_op:
        batch_op.add_column(sa.Column("wall_time_text", sa.DateTime(timezone=True), nullable=True))
    op.execute(
        "UPDATE metric_points SET wall_time_text = "
        "strftime('%Y-%m-%d %H:%M:%f', wall_time, 'unixepoch')"
    )
    with op.batch_alter_table("metric_points") as batch_op:
        batch_op.drop_column("wall_time")
        batch_op.alter_column(
            "wall_time_text",
            new_column_name="wall_time",
            existing_type=sa.DateTime(timezone=True),
            nullable=False,
        )
        batch_op.alter_column("value", existing_type=sa.FLOAT(), nullable=False)
