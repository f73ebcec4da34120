"""insert sentinels: tasks and job events inserted many rows to a statement on SQLite

Revision ID: 3e9c5a7d2b18
Revises: 8b2d4f6a0c35
Create Date: 2026-11-24 19:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3e9c5a7d2b18"
down_revision: str | None = "8b2d4f6a0c35"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLAlchemy writes a counter here for a many-row INSERT ... RETURNING, and sorts the ids it
# gets back by it; nothing reads it otherwise. Null for rows inserted one at a time.
TABLES = ("tasks", "job_events")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("_sentinel", sa.Integer(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("_sentinel")
