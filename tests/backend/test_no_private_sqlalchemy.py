"""The server uses SQLAlchemy through its public API: no name of SQLAlchemy's that starts
with an underscore, and no `_sa_` attribute, anywhere in backend/, but for the one use
listed here."""

from __future__ import annotations

import ast
from pathlib import Path

import backend

BACKEND = Path(backend.__file__).parent
# Tasks written together are marked clean as the flush marks what it wrote: no public call
# does that, and without it the flush walks every written task again (the module's cost).
KNOWN = {"jobs/task_writes.py": ["InstanceState._commit_all_states"]}


def private_uses(source: str) -> list[str]:
    """`name._private` where `name` was imported from SQLAlchemy, private names imported
    from it, and `_sa_` attributes of anything."""
    tree = ast.parse(source)
    imported: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if alias.name.startswith("_") or "._" in (node.module or ""):
                    found.append(f"line {node.lineno}: imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sqlalchemy"):
                    imported.add((alias.asname or alias.name).split(".")[0])
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        base = node.value
        if node.attr.startswith("_sa_") or (isinstance(base, ast.Name) and base.id in imported):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_finds_a_private_use() -> None:
    source = "from sqlalchemy.orm import InstanceState\nInstanceState._commit_all_states([])\n"
    assert private_uses(source) == ["line 2: InstanceState._commit_all_states"]


def test_the_backend_uses_no_private_sqlalchemy_but_the_one_known() -> None:
    found = {
        str(path.relative_to(BACKEND)): [use.split(": ", 1)[1] for use in uses]
        for path in sorted(BACKEND.rglob("*.py"))
        if (uses := private_uses(path.read_text()))
    }
    assert found == KNOWN
