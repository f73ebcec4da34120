"""The `strata` command run inside the test process, as a subprocess would see it.

A client command's own work is a request or two; its start as a subprocess is a second of
imports, and the CLI tests run a few hundred commands. typer's CliRunner runs the same app with
the environment it is given (os.environ is swapped for the call and restored after) and
answers what `subprocess.run` would: the exit code, stdout and stderr (an uncaught error's
traceback included). The commands' own starts stay tested as subprocesses: the server, the
agent and `strata up` everywhere, and client commands in the end-to-end files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence

from rich.console import Console
from typer.testing import CliRunner

from backend.cli import app

# What rich gives a console whose output is not a terminal, when COLUMNS does not say.
DEFAULT_COLUMNS = 80


def _module_consoles() -> Iterator[Console]:
    for name, module in list(sys.modules.items()):
        if name.startswith("backend.cli"):
            yield from (value for value in vars(module).values() if isinstance(value, Console))


def _width_from(env: Mapping[str, str]) -> int:
    columns = env.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else DEFAULT_COLUMNS


def run_strata(args: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`strata *args` with exactly `env` as its environment, run in this process."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    # The CLI's consoles are made at import, and a console takes its width from COLUMNS
    # then: a new process's would read this environment's.
    for console in _module_consoles():
        console.width = _width_from(env)
    try:
        result = CliRunner().invoke(app, list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["strata", *args], result.exit_code, result.stdout, stderr)
