"""server_replicas: each server replica, where it is reached and when it last renewed

Revision ID: 5c2e8a4f1d93
Revises: 3b9d7e1f5a60
Create Date: 2026-12-01 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5c2e8a4f1d93"
down_revision: str | None = "3b9d7e1f5a60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "server_replicas",
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("replica", name=op.f("pk_server_replicas")),
    )


def downgrade() -> None:
    op.drop_table("server_replicas")
