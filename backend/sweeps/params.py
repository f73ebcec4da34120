"""Parameters written into a job spec: ``${params.NAME}`` in env values and entrypoint items,
replaced by a trial's value (numbers and booleans as JSON writes them, strings as they are)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

PARAM_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
REFERENCE = re.compile(r"\$\{params\.([^}]*)\}")
# Where a job spec takes parameters: the training code's arguments and environment.
WRITABLE = ("entrypoint", "env")


def references(job: dict[str, Any]) -> list[tuple[str, str]]:
    """Each ``${params.NAME}`` in the job spec: (NAME, dotted field it is in). One outside
    env and entrypoint is reported with the field "job.<where>" and the name "" so that the
    caller names it as misplaced."""
    found: list[tuple[str, str]] = []
    for where, text in _strings(job, ("job",)):
        for match in REFERENCE.finditer(text):
            writable = len(where) > 1 and where[1] in WRITABLE
            found.append((match.group(1) if writable else "", ".".join(where)))
    return found


def filled_in(job: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A copy of the job spec with every reference in env values and entrypoint items replaced."""
    filled = dict(job)

    def fill(text: str) -> str:
        return REFERENCE.sub(lambda match: _text(params[match.group(1)]), text)

    if isinstance(job.get("entrypoint"), list):
        filled["entrypoint"] = [
            fill(item) if isinstance(item, str) else item for item in job["entrypoint"]
        ]
    if isinstance(job.get("env"), dict):
        filled["env"] = {
            key: fill(value) if isinstance(value, str) else value
            for key, value in job["env"].items()
        }
    return filled


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _strings(value: Any, where: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*where, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*where, str(index)))
