"""The SQLAlchemy hooks are registered by backend.session_hooks alone, in its order, once
however often it is asked, and by the server as it starts: never by importing a module."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, inspect
from sqlalchemy.orm import Session

import backend
from backend import session_hooks
from backend.app import create_app
from backend.db import PublishingSession
from backend.hosts.models import Device, Host
from backend.jobs.models import Job, Task
from backend.session_hooks import HOOKS
from tests.conftest import make_settings

BEFORE_FLUSH = [
    "backend.jobs.models.tasks_change_their_job",
    "backend.jobs.task_writes.update_tasks_together",
    "backend.jobs.versioning.update_jobs_together",
    "backend.audit.service.name_the_actor",
]
AFTER_COMMIT = ["backend.streams.publishing.publish", "backend.jobs.cluster_changes.hand_over"]


@pytest.fixture
def uninstalled() -> Iterator[None]:
    """No hook registered for the test; all of them again, in order, after it."""
    for hook in HOOKS:
        if event.contains(hook.target, hook.event, hook.listener):
            event.remove(hook.target, hook.event, hook.listener)
    yield
    for hook in HOOKS:
        if event.contains(hook.target, hook.event, hook.listener):
            event.remove(hook.target, hook.event, hook.listener)
    session_hooks.install()


def called(session: Session, name: str) -> list[str]:
    """The listeners a session calls for an event, in the order it calls them."""
    return [f"{fn.__module__}.{fn.__name__}" for fn in getattr(session.dispatch, name)]


def mapper_listeners(model: type[object], name: str) -> int:
    return len(list(getattr(inspect(model).dispatch, name)))


def test_installing_registers_each_hook_once_in_the_listed_order(uninstalled: None) -> None:
    session_hooks.install()
    session_hooks.install()
    assert called(Session(), "before_flush") == BEFORE_FLUSH
    assert called(Session(), "after_commit") == []  # only the server's sessions publish
    publishing = PublishingSession()
    assert called(publishing, "before_flush") == BEFORE_FLUSH
    assert called(publishing, "after_commit") == AFTER_COMMIT
    for name in ("after_flush", "after_rollback", "after_soft_rollback"):
        assert len(called(publishing, name)) == 1, name
    assert all(event.contains(h.target, h.event, h.listener) for h in HOOKS)
    expected = {
        (Task, "after_insert"): 1,
        (Task, "after_update"): 1,
        (Task, "after_delete"): 0,
        (Job, "after_insert"): 1,
        (Job, "after_update"): 0,
        (Device, "after_update"): 1,
        (Host, "after_delete"): 1,
    }
    assert {key: mapper_listeners(*key) for key in expected} == expected


def test_importing_the_modules_registers_nothing() -> None:
    """In a fresh interpreter (this one has them installed): every module imported, in an
    order of its own, and not one hook registered until install()."""
    code = (
        "import backend.audit.service, backend.jobs.versioning, backend.jobs.task_writes\n"
        "import backend.app\n"
        "from sqlalchemy import event\n"
        "from backend.session_hooks import HOOKS\n"
        "print(sum(event.contains(h.target, h.event, h.listener) for h in HOOKS))\n"
    )
    root = Path(backend.__file__).parent.parent  # "-c" imports from the working directory
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["0"]


def test_the_server_installs_the_hooks_as_it_starts(uninstalled: None, tmp_path: Path) -> None:
    sqlite = f"sqlite:///{tmp_path / 'strata.db'}"
    with TestClient(create_app(make_settings(sqlite, tmp_path / "data"))):
        assert all(event.contains(h.target, h.event, h.listener) for h in HOOKS)
        assert called(PublishingSession(), "before_flush") == BEFORE_FLUSH
