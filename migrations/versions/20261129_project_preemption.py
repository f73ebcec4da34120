"""whether a project's jobs may preempt other projects' jobs

Revision ID: 5c1e7b3f9a24
Revises: 2f8b6d1a9c35
Create Date: 2026-11-29 07:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5c1e7b3f9a24"
down_revision: str | None = "2f8b6d1a9c35"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTER TABLE with a server default: existing projects keep today's behaviour.
    op.add_column(
        "projects",
        sa.Column(
            "may_preempt_other_projects", sa.Boolean(), nullable=False, server_default=sa.true()
        ),
    )


def downgrade() -> None:
    op.drop_column("projects", "may_preempt_other_projects")
