"""`strata users` and `strata projects`: people, their tokens, projects and their members."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from backend.cli.client import ServerOption, TokenOption, connect, console
from backend.cli.tokens import parse_duration
from backend.teams.roles import ProjectRole

# The names of the roles, for help texts: viewer, member, admin.
_ROLES = ", ".join(role.value for role in ProjectRole)


def users_create(
    name: Annotated[str, typer.Argument(help="Lower case: a letter, then letters, digits, _.-")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Create a user (admin token); add them to projects with `strata projects members add`."""
    with connect(server, token) as client:
        user = client.create_user(name)
    console.print(f"user {escape(user.name)} created")


def users_ls(server: ServerOption = None, token: TokenOption = None) -> None:
    """List the users (admin token)."""
    with connect(server, token) as client:
        found = client.users()
    table = Table("NAME", "DEFAULT PROJECT", "CREATED", "STATE")
    for user in found:
        table.add_row(
            user.name,
            user.default_project or "-",
            user.created_at.strftime("%Y-%m-%dT%H:%M:%S"),
            "disabled" if user.disabled_at else "active",
        )
    console.print(table)


def users_disable(
    name: Annotated[str, typer.Argument(help="The user.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Disable a user (admin token): every token of theirs is refused from now on; their jobs
    and memberships stay."""
    with connect(server, token) as client:
        client.set_user_disabled(name, True)
    console.print(f"user {escape(name)} disabled")


def users_enable(
    name: Annotated[str, typer.Argument(help="The user.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Enable a disabled user again (admin token): their tokens that are neither revoked nor
    expired work again."""
    with connect(server, token) as client:
        client.set_user_disabled(name, False)
    console.print(f"user {escape(name)} enabled")


def users_token(
    name: Annotated[
        str, typer.Argument(help="The user (yourself, or anyone with an admin token).")
    ],
    label: Annotated[
        str, typer.Option("--name", help="What the token is for, e.g. laptop or ci.")
    ] = "cli",
    expires: Annotated[
        str | None, typer.Option(help="Refused after this long: 90m, 12h, 30d.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Make a token for a user; its secret is printed once. Revoke it with `strata tokens
    revoke ID`."""
    seconds = None if expires is None else parse_duration(expires)
    with connect(server, token) as client:
        created = client.create_user_token(name, label, seconds)
    console.print(f"token {created.id} ({escape(created.name)}) for user {escape(name)} created")
    console.print(created.token, soft_wrap=True, markup=False)
    console.print("  it is shown only now: keep it somewhere safe")


def projects_create(
    name: Annotated[str, typer.Argument(help="Lower case: a letter, then letters, digits, _.-")],
    description: Annotated[str, typer.Option(help="What the project is.")] = "",
    slurm_account: Annotated[
        str | None, typer.Option(help="The Slurm account its Slurm jobs are charged to.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Create a project (admin token)."""
    with connect(server, token) as client:
        project = client.create_project(name, description, slurm_account)
    console.print(f"project {escape(project.name)} created")


def projects_ls(server: ServerOption = None, token: TokenOption = None) -> None:
    """List your projects and your role in each."""
    with connect(server, token) as client:
        found = client.projects()
    table = Table("NAME", "ROLE", "MAX GPUS", "MAX PRIORITY", "DESCRIPTION")
    for project in found:
        table.add_row(
            project.name,
            project.role.value,
            "-" if project.max_gpus is None else str(project.max_gpus),
            "-" if project.max_priority is None else str(project.max_priority),
            project.description,
        )
    console.print(table)


def _limit(text: str, option: str) -> int | None:
    """A limit as given: a whole number, or `none` for no limit."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise typer.BadParameter(
            f"expected a whole number or none, got {text!r}", param_hint=option
        ) from None


def projects_quota(
    name: Annotated[str, typer.Argument(help="The project.")],
    max_gpus: Annotated[
        str | None,
        typer.Option(
            "--max-gpus",
            help="GPUs its native jobs may hold at once (a job over it waits); none: no limit.",
        ),
    ] = None,
    max_priority: Annotated[
        str | None,
        typer.Option("--max-priority", help="The highest priority its jobs may ask for; none."),
    ] = None,
    preempt_other_projects: Annotated[
        bool | None,
        typer.Option(
            "--preempt-other-projects/--no-preempt-other-projects",
            help="Whether its jobs may preempt other projects' jobs of lower priority.",
        ),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Show a project's quotas, or set them (admin token); a quota not given stays as it is."""
    # (the value,) when given: `none` gives (None,), no limit.
    gpus = None if max_gpus is None else (_limit(max_gpus, "--max-gpus"),)
    priority = None if max_priority is None else (_limit(max_priority, "--max-priority"),)
    with connect(server, token) as client:
        current = client.project(name)
        shown = (current.max_gpus, current.max_priority)
        preempts = current.may_preempt_other_projects
        if gpus is not None or priority is not None or preempt_other_projects is not None:
            quota = client.set_quota(
                name,
                max_gpus=current.max_gpus if gpus is None else gpus[0],
                max_priority=current.max_priority if priority is None else priority[0],
                may_preempt_other_projects=(
                    preempts if preempt_other_projects is None else preempt_other_projects
                ),
            )
            shown = (quota.max_gpus, quota.max_priority)
            preempts = quota.may_preempt_other_projects
    gpus_text, priority_text = ("no limit" if v is None else str(v) for v in shown)
    others = "may" if preempts else "may not"
    console.print(
        f"project {escape(name)}: max GPUs {gpus_text}, max priority {priority_text}, "
        f"{others} preempt other projects"
    )


def members_ls(
    project: Annotated[str, typer.Argument(help="The project.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """List a project's members and their roles."""
    with connect(server, token) as client:
        detail = client.project(project)
    table = Table("USER", "ROLE")
    for member in detail.members:
        table.add_row(member.user, member.role.value)
    console.print(table)


def members_add(
    project: Annotated[str, typer.Argument(help="The project.")],
    user: Annotated[str, typer.Argument(help="The user.")],
    role: Annotated[ProjectRole, typer.Option(help=f"One of {_ROLES}.")] = ProjectRole.member,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Add a user to a project with a role, or change their role (the project's admins)."""
    with connect(server, token) as client:
        member = client.set_member(project, user, role.value)
    console.print(f"{escape(member.user)} is a {member.role.value} of {escape(project)}")


def members_remove(
    project: Annotated[str, typer.Argument(help="The project.")],
    user: Annotated[str, typer.Argument(help="The user.")],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Take a user out of a project (the project's admins)."""
    with connect(server, token) as client:
        client.remove_member(project, user)
    console.print(f"{escape(user)} removed from {escape(project)}")


def register(app: typer.Typer) -> None:
    users = typer.Typer(help="Users and their tokens.", no_args_is_help=True)
    users.command("create")(users_create)
    users.command("ls")(users_ls)
    users.command("list", hidden=True)(users_ls)
    users.command("token")(users_token)
    users.command("disable")(users_disable)
    users.command("enable")(users_enable)
    app.add_typer(users, name="users")

    projects = typer.Typer(help="Projects and their members.", no_args_is_help=True)
    projects.command("create")(projects_create)
    projects.command("ls")(projects_ls)
    projects.command("list", hidden=True)(projects_ls)
    projects.command("quota")(projects_quota)
    members = typer.Typer(help="Who belongs to a project, in what role.", no_args_is_help=True)
    members.command("ls")(members_ls)
    members.command("list", hidden=True)(members_ls)
    members.command("add")(members_add)
    members.command("remove")(members_remove)
    projects.add_typer(members, name="members")
    app.add_typer(projects, name="projects")
