"""a host being drained takes no new task

Revision ID: 2f8b6d1a9c35
Revises: 7a2c5e9d4b31
Create Date: 2026-11-29 01:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2f8b6d1a9c35"
down_revision: str | None = "7a2c5e9d4b31"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE: a batch operation would rebuild `hosts`, deleting its devices on SQLite.


def upgrade() -> None:
    op.add_column("hosts", sa.Column("draining_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("hosts", "draining_since")
