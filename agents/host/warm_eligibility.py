"""When a task can start in a warm process (agents.host.warm) and be the same as a cold start.

It cannot when the job asks otherwise or cannot be run that way (``warm_start_refusal``), nor
when the warm processes were started otherwise than the task would be (``task_refusal``): a
variable read before TensorFlow loads that the task sets to another value, or a module in the
task's own directory that a cold start would have imported instead of the one already loaded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agents.host.process import PYTHON_NAMES, inherited_env
from agents.protocol import StartTask

# Variables read while the interpreter starts or TensorFlow is imported: a task whose
# environment gives one of them another value than the warm process had cannot be the same
# warm as cold, and starts cold. The rest of the environment is read later (TF_CONFIG by the
# strategy, CUDA_VISIBLE_DEVICES when the first device is initialised, GRPC_FAIL_FAST when a
# channel is made), after the warm process has taken the task's values.
IMPORT_TIME_PREFIXES = (
    "PYTHON",  # the interpreter's own (PYTHONPATH, PYTHONHASHSEED, PYTHONUNBUFFERED, ...)
    "LD_",  # the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH)
    "MALLOC_",  # glibc's allocator, set up before main
    "LC_",  # the locale: stdio and filesystem encodings
    "TF_CPP_",  # TensorFlow's C++ logging, read when it first logs (the import does)
    "TF_ENABLE_",  # TF_ENABLE_ONEDNN_OPTS and friends, read by the import
    "XLA_",
    "CUDA_",  # CUDA_HOME, CUDA_CACHE_*: found by the import's library loading
    "OMP_",  # OpenMP and MKL thread pools, made by the import
    "KMP_",
    "MKL_",
    "GRPC_",  # gRPC's tracing and verbosity, read when gRPC is loaded
)
IMPORT_TIME_NAMES = frozenset(
    {"TF_USE_LEGACY_KERAS", "TF_XLA_FLAGS", "KERAS_BACKEND", "LANG", "LANGUAGE", "TZ"}
)
# Read after the assignment although their prefixes say otherwise.
READ_AFTER_IMPORT = frozenset({"CUDA_VISIBLE_DEVICES", "GRPC_FAIL_FAST"})


def read_at_import(name: str) -> bool:
    """Whether a variable is read before a warm process gets its task (see above)."""
    if name in READ_AFTER_IMPORT:
        return False
    return name in IMPORT_TIME_NAMES or name.startswith(IMPORT_TIME_PREFIXES)


def warm_env(inherited: Mapping[str, str]) -> dict[str, str]:
    """A warm process's environment: what every task inherits from the agent (as a cold
    start's, before the start message's variables), and what the import needs."""
    env = inherited_env(inherited)
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    return env


def import_time_differences(task: Mapping[str, str], warm: Mapping[str, str]) -> list[str]:
    """The import-time variables the task would see otherwise than the warm process did."""
    names = {name for name in (*task, *warm) if read_at_import(name)}
    return sorted(name for name in names if task.get(name) != warm.get(name))


@dataclass(frozen=True)
class Entry:
    """How a task's argv runs its Python: a script or a module, and its own arguments."""

    mode: str  # "script" | "module"
    target: str  # the script's path as given, or the module's name
    args: list[str]


def python_entry(argv: list[str]) -> Entry | None:
    """`python script.py ...` or `python -m module ...`; None for anything else."""
    if len(argv) < 2 or argv[0] not in PYTHON_NAMES:
        return None
    if argv[1] == "-m":
        if len(argv) < 3 or not all(part.isidentifier() for part in argv[2].split(".")):
            return None
        return Entry("module", argv[2], argv[3:])
    if argv[1].startswith("-") or not argv[1]:
        return None  # interpreter options (-u, -X, -c, ...) are the interpreter's business
    return Entry("script", argv[1], argv[2:])


def warm_start_refusal(command: StartTask) -> str | None:
    """Why this start cannot be warm whatever the pool holds (None: it can)."""
    if not command.warm_start:
        return "the job asks for cold starts (warm_start: false)"
    if command.environment is not None:
        return "the job runs in its own environment"
    if python_entry(command.argv) is None:
        return "the entrypoint is not `python script.py` or `python -m module`"
    if command.memory_limit is not None:
        # What a warm process imported is charged to the cgroup it was in before.
        return "the task has a memory limit"
    return None


def importable_names(directory: Path) -> set[str]:
    """Top-level modules a directory first on sys.path would provide: modules and regular
    packages (a namespace package loses to one found later)."""
    names = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.is_dir():
                if (Path(entry.path) / "__init__.py").exists():
                    names.add(entry.name)
            elif entry.name.endswith((".py", ".pyc", ".so")):
                names.add(entry.name.split(".", 1)[0])
    return names


def shadowed(modules: Mapping[str, str | None], path0: Path) -> list[str]:
    """Modules the warm process imported from elsewhere that a cold start would have found
    in ``path0`` (its sys.path[0]) instead."""
    real = os.path.realpath(path0)
    return sorted(
        name
        for name in importable_names(path0)
        if name in modules and modules[name] is not None and modules[name] != real
    )


def task_refusal(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    warm: Mapping[str, str],
    modules: Mapping[str, str | None],
) -> str | None:
    """Why a start that could be warm (``warm_start_refusal``) cannot be in a warm process
    started with ``warm`` that imported ``modules`` (None: it can)."""
    differs = import_time_differences(env, warm)
    if differs:
        return f"the job sets {', '.join(differs)}, read before TensorFlow loads"
    entry = python_entry(argv)
    assert entry is not None
    if entry.mode == "script":
        script = cwd / entry.target
        if not script.is_file():
            return f"{entry.target} is not a file (Python says why)"
        path0 = Path(os.path.realpath(script)).parent
    else:
        path0 = cwd
    if modules and (hidden := shadowed(modules, path0)):
        return f"{path0} has {', '.join(hidden)}, which a warm process imported from elsewhere"
    return None
