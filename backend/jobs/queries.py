"""Reads of jobs, tasks and events. Keyword-only; the caller owns the transaction."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Collection, Sequence
from operator import itemgetter
from types import SimpleNamespace
from typing import Any, NamedTuple, cast

from pydantic import TypeAdapter
from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    Table,
    bindparam,
    func,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import joinedload, selectinload
from sqlalchemy.sql.base import ExecutableOption

from agents.vocabulary import TaskName, format_task_name
from backend.errors import NotFound
from backend.hosts.models import Host
from backend.jobs.actions import job_actions
from backend.jobs.models import Job, JobClient, JobEvent, Task
from backend.jobs.schemas import ClientRead, JobRead, TaskRead
from backend.jobs.spec import stored_spec
from backend.jobs.states import JobStatus
from backend.json_rows import JsonRows


def _with_tasks() -> tuple[ExecutableOption, ...]:
    return (selectinload(Job.tasks).joinedload(Task.host),)


async def get_job(*, session: AsyncSession, job_id: int) -> Job:
    statement = select(Job).where(Job.id == job_id).options(*_with_tasks())
    job = (await session.execute(statement)).scalar_one_or_none()
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return job


async def list_jobs(
    *,
    session: AsyncSession,
    statuses: Sequence[JobStatus] = (),
    name: str | None = None,
    tags: Sequence[str] = (),
    text: str | None = None,
    project_ids: Collection[int] | None = None,
    limit: int,
    offset: int,
) -> tuple[list[JobRead], int]:
    """A page of jobs, newest first, and the total that match the filters: every tag in
    `tags`, `text` in the name or the description (any case), and one of `project_ids`
    (None: any project). Read as plain values, not ORM objects: a page holds many tasks,
    and loading them into the session would cost more than the rest of the request."""
    query = _page_query(
        by_id=False,
        projects=project_ids is not None,
        statuses=bool(statuses),
        name=bool(name),
        tags=len(tags),
        text=bool(text),
    )
    values: dict[str, Any] = {"limit": limit, "offset": offset}
    if project_ids is not None:
        values["project_ids"] = list(project_ids)
    if statuses:
        values["statuses"] = [status.value for status in statuses]
    if name:
        values["name"] = name
    for n, tag in enumerate(tags):
        # The spec's tags as JSON text, e.g. ["a", "b"]; a tag holds no quote (TAG_PATTERN),
        # so '"tag"' in that text is exactly one of its elements. Same SQL on both databases.
        values[f"tag_{n}"] = _like_escaped(f'"{tag}"')
    if text:
        values["text"] = _like_escaped(text)
    return await _job_views(session, query, values)


async def read_job(*, session: AsyncSession, job_id: int) -> JobRead:
    """A job's view, read as for the list (a reader changes nothing)."""
    query = _page_query(by_id=True, projects=False, statuses=False, name=False, tags=0, text=False)
    views, _ = await _job_views(session, query, {"job_id": job_id, "limit": 1, "offset": 0})
    if not views:
        raise NotFound(f"job {job_id} does not exist")
    view = views[0]
    if view.spec.coordinator == "client":
        client = await session.get(JobClient, job_id)
        view.client = ClientRead.of(client) if client is not None else None
    return view


class _PageQuery(NamedTuple):
    """A page of jobs with their tasks and how many jobs match, as one row: the count, the
    jobs and their tasks (JsonRows says why), every value a bound parameter."""

    statement: Select[tuple[int, Any, Any]]
    jobs: JsonRows
    tasks: JsonRows


@functools.lru_cache(maxsize=64)
def _page_query(
    *, by_id: bool, projects: bool, statuses: bool, name: bool, tags: int, text: bool
) -> _PageQuery:
    """The query for one set of filters, built once: building it costs more than SQLite
    answering it for one job."""
    filters: list[ColumnElement[bool]] = []
    if by_id:
        filters.append(_JOBS.c.id == bindparam("job_id", type_=Integer))
    if projects:
        filters.append(_JOBS.c.project_id.in_(bindparam("project_ids", expanding=True)))
    if statuses:
        filters.append(_JOBS.c.status.in_(bindparam("statuses", expanding=True)))
    if name:
        filters.append(_JOBS.c.name == bindparam("name", type_=String))
    for n in range(tags):
        tag = bindparam(f"tag_{n}", type_=String)
        filters.append(_JOBS.c.spec["tags"].as_string().contains(tag, escape=_LIKE_ESCAPE))
    if text:
        text_value = bindparam("text", type_=String)
        filters.append(
            or_(
                _JOBS.c.name.icontains(text_value, escape=_LIKE_ESCAPE),
                _JOBS.c.spec["description"].as_string().icontains(text_value, escape=_LIKE_ESCAPE),
            )
        )
    page = (
        select(*_JOB_COLUMNS)
        .where(*filters)
        .order_by(_JOBS.c.id.desc())
        .limit(bindparam("limit", type_=Integer))
        .offset(bindparam("offset", type_=Integer))
        .subquery("page")
    )
    jobs = JsonRows({column.key: column for column in page.c})
    tasks = JsonRows(_TASK_COLUMNS)
    statement = select(
        select(func.count(_JOBS.c.id)).where(*filters).scalar_subquery(),
        select(jobs).select_from(page).scalar_subquery(),
        select(tasks)
        .select_from(_TASKS.outerjoin(_HOSTS, _TASKS.c.host_id == _HOSTS.c.id))
        .where(_TASKS.c.job_id.in_(select(page.c.id)))
        .scalar_subquery(),
    )
    return _PageQuery(statement, jobs, tasks)


_LIKE_ESCAPE = "/"


def _like_escaped(value: str) -> str:
    """The value matched literally by LIKE with _LIKE_ESCAPE: no '%' or '_' wildcard."""
    return (
        value.replace(_LIKE_ESCAPE, _LIKE_ESCAPE * 2)
        .replace("%", _LIKE_ESCAPE + "%")
        .replace("_", _LIKE_ESCAPE + "_")
    )


async def _job_views(
    session: AsyncSession, query: _PageQuery, values: dict[str, Any]
) -> tuple[list[JobRead], int]:
    """The page's views, newest first, and how many jobs match."""
    total, job_values, task_values = (await session.execute(query.statement, values)).one()
    task_rows = sorted(query.tasks.decode(task_values), key=itemgetter("id"))
    for task in task_rows:
        task["name"] = format_task_name(task["role"], task["index"])
        task["gpus"] = task["gpus"] or []
    by_job: dict[int, list[TaskRead]] = defaultdict(list)
    for task, view in zip(task_rows, _TASK_VIEWS.validate_python(task_rows), strict=True):
        by_job[task["job_id"]].append(view)
    job_rows = sorted(query.jobs.decode(job_values), key=itemgetter("id"), reverse=True)
    views = [job_view(SimpleNamespace(**job), by_job[job["id"]]) for job in job_rows]
    return views, int(total)


async def latest_events(
    *,
    session: AsyncSession,
    after_id: int,
    limit: int,
    project_ids: Collection[int] | None = None,
) -> list[JobEvent]:
    """The newest `limit` events of all jobs (of these projects; None: any) after
    `after_id`, oldest first."""
    statement = select(JobEvent).where(JobEvent.id > after_id)
    if project_ids is not None:
        statement = statement.join(Job, Job.id == JobEvent.job_id).where(
            Job.project_id.in_(project_ids)
        )
    newest = await session.scalars(statement.order_by(JobEvent.id.desc()).limit(limit))
    return list(reversed(list(newest)))


async def job_events(*, session: AsyncSession, job_id: int, after_id: int = 0) -> list[JobEvent]:
    result = await session.scalars(
        select(JobEvent)
        .where(JobEvent.job_id == job_id, JobEvent.id > after_id)
        .order_by(JobEvent.id)
    )
    return list(result)


async def find_task(*, session: AsyncSession, job_id: int, task: str) -> Task | None:
    """A job's task by its name (`worker:1`), with its job loaded; None when there is none."""
    try:
        name = TaskName.parse(task)
    except ValueError:  # names arrive validated anyway
        return None
    return await session.scalar(
        select(Task)
        .where(Task.job_id == job_id, Task.role == name.role.value, Task.index == name.index)
        .options(joinedload(Task.job))
    )


# What a job's and a task's view read, as the tables' columns: Core rows, which skip the
# ORM's loading (list_jobs reads these and nothing else).
_JOBS = cast(Table, Job.__table__)
_TASKS = cast(Table, Task.__table__)
_HOSTS = cast(Table, Host.__table__)
_JOB_COLUMNS = tuple(
    _JOBS.c[name]
    for name in (
        "id",
        "name",
        "status",
        "reason",
        "strategy",
        "priority",
        "restart_count",
        "failure_count",
        "spec",
        "slurm_job_id",
        "project_id",
        "submitted_by",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
    )
)
# TaskRead's fields that are a column of the same name.
_TASK_FIELDS = (
    "role",
    "index",
    "status",
    "port",
    "pid",
    "attempt",
    "failure_count",
    "exit_code",
    "started_at",
    "finished_at",
)
# A task's view as read: its id and job, TaskRead's same-named fields, its GPUs and its
# host's name.
_TASK_COLUMNS: dict[str, ColumnElement[Any]] = {
    "id": _TASKS.c.id,
    "job_id": _TASKS.c.job_id,
    **{field: _TASKS.c[field] for field in _TASK_FIELDS},
    "gpus": _TASKS.c.gpu_indices,
    "host": _HOSTS.c.name,
}
# A page's task views validated in one call, cheaper than a model built per row.
_TASK_VIEWS = TypeAdapter(list[TaskRead])


def job_read(job: Job) -> JobRead:
    return job_view(job, [task_read(task) for task in job.tasks])


def job_view(job: Job | SimpleNamespace, tasks: list[TaskRead]) -> JobRead:
    """A job's view, from a Job, a page's values or the values just inserted, with its
    tasks' views."""
    spec = stored_spec(job.spec)
    return JobRead(
        id=job.id,
        name=job.name,
        status=job.status,
        reason=job.reason,
        strategy=job.strategy,
        priority=job.priority,
        restart_count=job.restart_count,
        failure_count=job.failure_count,
        spec=spec,
        tasks=tasks,
        actions=job_actions(job.status, spec, tasks),
        slurm_job_id=job.slurm_job_id,
        project_id=job.project_id,
        submitted_by=job.submitted_by,
        created_at=job.created_at,
        updated_at=job.updated_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def task_read(task: Task) -> TaskRead:
    return TaskRead(
        name=task.name,
        host=task.host.name if task.host else None,
        gpus=list(task.gpu_indices or []),
        **{key: getattr(task, key) for key in _TASK_FIELDS},
    )
