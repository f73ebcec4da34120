"""insert sentinels: jobs and audit entries inserted many rows to a statement on SQLite

Revision ID: 9d4f2b7c1e60
Revises: 3e9c5a7d2b18
Create Date: 2026-11-24 23:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9d4f2b7c1e60"
down_revision: str | None = "3e9c5a7d2b18"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As in 3e9c5a7d2b18: submissions written together (backend.scheduling.intake) insert many jobs
# and their audit entries at once.
TABLES = ("jobs", "audit_entries")


# Plain ALTER TABLE (SQLite has DROP COLUMN): a batch operation would copy `jobs` into a new
# table whose foreign keys an earlier migration's downgrade could then no longer drop.


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("_sentinel", sa.Integer(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        op.drop_column(table, "_sentinel")
