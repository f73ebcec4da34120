"""failure counts of jobs and tasks, apart from their restarts

Revision ID: 4c6e8a0b2d17
Revises: 9d4f2b7c1e60
Create Date: 2026-11-28 03:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "4c6e8a0b2d17"
down_revision: str | None = "9d4f2b7c1e60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, as in 9d4f2b7c1e60: a batch operation would rebuild `jobs` (deleting
# its tasks on SQLite) and leave foreign keys an earlier downgrade could not drop.
TABLES = ("jobs", "tasks")


def upgrade() -> None:
    # Existing rows start at 0 failures: their restart counts mix failures with requested
    # restarts, and nothing recorded tells them apart reliably.
    for table in TABLES:
        op.add_column(
            table, sa.Column("failure_count", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    for table in TABLES:
        op.drop_column(table, "failure_count")
