"""teams: users, projects and members; every job in a project, existing ones in `default`

Revision ID: 7a1c3e5f9b24
Revises: 5e3a8c1f9b20
Create Date: 2026-11-24 04:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "7a1c3e5f9b24"
down_revision: str | None = "5e3a8c1f9b20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("max_priority", sa.Integer(), nullable=True),
        sa.Column("slurm_account", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("name", name=op.f("uq_projects_name")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("default_project_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["default_project_id"],
            ["projects.id"],
            name=op.f("fk_users_default_project_id_projects"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_table(
        "project_members",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column(
            "role",
            sa.Enum("viewer", "member", "admin", name="projectrole", native_enum=False, length=16),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_project_members_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_project_members_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", "user_id", name=op.f("pk_project_members")),
    )
    with op.batch_alter_table("project_members", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_project_members_user_id"), ["user_id"], unique=False)

    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_api_tokens_user_id_users"),
            "users",
            ["user_id"],
            ["id"],
            ondelete="CASCADE",
        )

    # Every job belongs to a project: the ones there are go to `default`, made here so that a
    # fresh database has it too.
    projects = sa.table(
        "projects",
        sa.column("id", sa.Integer()),
        sa.column("name", sa.String()),
        sa.column("description", sa.Text()),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    op.bulk_insert(
        projects,
        [
            {
                "name": "default",
                "description": "Jobs submitted without a project.",
                "created_at": datetime.now(UTC),
            }
        ],
    )
    if op.get_bind().dialect.name == "sqlite":
        _add_job_project_on_sqlite()
    else:
        op.add_column("jobs", sa.Column("project_id", sa.Integer(), nullable=True))
        op.execute(_INTO_DEFAULT)
        op.alter_column("jobs", "project_id", existing_type=sa.Integer(), nullable=False)
        op.create_foreign_key(
            op.f("fk_jobs_project_id_projects"), "jobs", "projects", ["project_id"], ["id"]
        )
    op.create_index(op.f("ix_jobs_project_id"), "jobs", ["project_id"], unique=False)
    op.add_column("jobs", sa.Column("submitted_by", sa.String(length=128), nullable=True))


_INTO_DEFAULT = "UPDATE jobs SET project_id = (SELECT id FROM projects WHERE name = 'default')"


def _add_job_project_on_sqlite() -> None:
    """SQLite cannot add a NOT NULL reference in place, and a batch rebuild of `jobs` would drop
    the table, which (foreign keys on) deletes every task, event and checkpoint of every job
    through their ON DELETE CASCADE. So: add the column nullable, fill it, then mark it NOT NULL
    in the stored schema, the way SQLite's documentation describes for constraint-only changes
    (the rows' format does not change, and every row already has a value)."""
    op.execute("ALTER TABLE jobs ADD COLUMN project_id INTEGER REFERENCES projects (id)")
    op.execute(_INTO_DEFAULT)
    _edit_jobs_schema(
        "project_id INTEGER REFERENCES projects (id)",
        "project_id INTEGER NOT NULL REFERENCES projects (id)",
    )


def _edit_jobs_schema(old: str, new: str) -> None:
    """Change a constraint in the stored CREATE TABLE of `jobs` (SQLite only)."""
    bind = op.get_bind()
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql(
        "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE type = 'table' AND name = 'jobs'",
        (old, new),
    )
    bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def downgrade() -> None:
    op.drop_column("jobs", "submitted_by")
    op.drop_index(op.f("ix_jobs_project_id"), table_name="jobs")
    if op.get_bind().dialect.name == "sqlite":
        # As on the way up: no rebuild of `jobs` (it would delete every job's tasks). SQLite
        # drops a column in place once no constraint names it.
        _edit_jobs_schema(
            "project_id INTEGER NOT NULL REFERENCES projects (id)", "project_id INTEGER"
        )
    else:
        op.drop_constraint(op.f("fk_jobs_project_id_projects"), "jobs", type_="foreignkey")
    op.drop_column("jobs", "project_id")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_api_tokens_user_id_users"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))
        batch_op.drop_column("user_id")
    # Tokens of users go with the users: a stored token of kind user means nothing without one.
    op.execute("DELETE FROM api_tokens WHERE kind = 'user'")
    with op.batch_alter_table("project_members", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_project_members_user_id"))
    op.drop_table("project_members")
    op.drop_table("users")
    op.drop_table("projects")
