"""a host's health: its faults, and a cordon (no new task) with its reason

Revision ID: 8e3d1f5a7c42
Revises: 5c1e7b3f9a24
Create Date: 2026-11-29 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8e3d1f5a7c42"
down_revision: str | None = "5c1e7b3f9a24"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Plain ALTER TABLE: a batch operation would rebuild `hosts`, deleting its devices on SQLite.
# The lists default to '[]' for the rows already there.
LISTS = ("faults", "warnings", "acknowledged_faults")


def upgrade() -> None:
    op.add_column("hosts", sa.Column("cordon_reason", sa.String(512), nullable=True))
    op.add_column("hosts", sa.Column("cordoned_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("hosts", sa.Column("cordon_cause", sa.String(16), nullable=True))
    for name in LISTS:
        op.add_column(
            "hosts", sa.Column(name, sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
        )
    op.add_column("hosts", sa.Column("faults_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for name in ("faults_since", *reversed(LISTS), "cordon_cause", "cordoned_at", "cordon_reason"):
        op.drop_column("hosts", name)
