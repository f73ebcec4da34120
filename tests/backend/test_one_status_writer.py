"""A job's status has one writer, lifecycle.status_change: nothing else in backend/ sets a
job's status (an attribute, a committed value, a column of an UPDATE), but the insert of a
new job as pending. Read from the source, as a check of where writes are."""

from __future__ import annotations

import ast
from pathlib import Path

import backend

BACKEND = Path(backend.__file__).parent
# A new job is inserted pending (scheduling/new_jobs.insert_jobs): a creation, not a change.
KNOWN = {"scheduling/new_jobs.py": ['"status": JobStatus.pending']}


def status_writes(source: str) -> list[str]:
    """`<job>.status = ...`, `set_committed_value(<job>, "status", ...)`, and "status" set
    to a JobStatus in a dict or a keyword (the values of an UPDATE or an INSERT)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "status"
                    and "job" in ast.unparse(target.value).lower()
                ):
                    found.append(f"{ast.unparse(target)} = {ast.unparse(node.value)}")
        elif isinstance(node, ast.Call):
            args = node.args
            if (
                ast.unparse(node.func).endswith("set_committed_value")
                and len(args) >= 2
                and isinstance(args[1], ast.Constant)
                and args[1].value == "status"
                and "job" in ast.unparse(args[0]).lower()
            ):
                found.append(ast.unparse(node))
            function = ast.unparse(node.func)
            if function == "Job" or function.endswith(".values"):  # a row's values, not a call
                found += [
                    f"status={ast.unparse(k.value)}"
                    for k in node.keywords
                    if k.arg == "status" and "JobStatus." in ast.unparse(k.value)
                ]
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "status"
                    and "JobStatus." in ast.unparse(value)
                ):
                    found.append(f'"status": {ast.unparse(value)}')
    return found


def test_the_check_finds_each_kind_of_write() -> None:
    source = (
        "job.status = to\n"
        'set_committed_value(job, "status", JobStatus.running)\n'
        'values |= {"status": JobStatus.running}\n'
        "update(Job).values(status=JobStatus.failed)\n"
        "task.status = TaskStatus.running\n"  # a task's: not a job's
        "end_job(job=job, status=JobStatus.failed)\n"  # a call that changes it (through the one)
    )
    assert status_writes(source) == [
        "job.status = to",
        "set_committed_value(job, 'status', JobStatus.running)",
        '"status": JobStatus.running',
        "status=JobStatus.failed",
    ]


def test_no_module_but_lifecycle_writes_a_jobs_status() -> None:
    found = {
        str(path.relative_to(BACKEND)): writes
        for path in sorted(BACKEND.rglob("*.py"))
        if (writes := status_writes(path.read_text()))
    }
    assert found == KNOWN
