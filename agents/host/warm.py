"""`python -m agents.host.warm --channel-fd N`: a task process started before its task.

The agent's warm pool (agents/host/warm_pool.py) starts these with TensorFlow, tf_keras and
Strata's runtime already imported: the slow part of every task start. Each then waits,
blocked in a read (no CPU), on the socket the agent holds for exactly one assignment: the
attempt's whole environment, working dir and argv. Applying it does what a cold start does
before the interpreter runs the task: the environment replaces this process's own (before
anything has initialised a device: importing TensorFlow does not, so CUDA_VISIBLE_DEVICES
still counts), then the working dir, ``sys.argv``, ``sys.path[0]`` and ``__main__`` as
``python script.py`` or ``python -m module`` would set them. From there the task is this
process: its output, its exit code, its signals.

Protocol on the socket (one JSON object per line): this process sends ``ready`` (its pid and
the top-level modules it imported, with where each came from, so that the agent can tell
whether a task's own directory would shadow one of them); the agent sends the assignment.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import resource
import runpy
import socket
import sys
import types
from pathlib import Path
from typing import Any

from agents.host import procfs

MAX_ASSIGNMENT_BYTES = 8 * 1024 * 1024  # a start message's env and argv are far smaller
CHANNEL_FLAG = "--channel-fd"
# Exit codes before a task is assigned (never a task's own: nothing of a task has run).
EXIT_NO_ASSIGNMENT = 3  # the agent closed the socket without assigning a task
EXIT_BAD_ASSIGNMENT = 4


# The runtime's modules that `agents.runtime` imports only when a task first needs them
# (callbacks(), the metric sender and its websocket client, checkpoints, the coordinator's
# health, the ps/worker server): imported ahead, so that a warm task's start does not wait
# for them. None of them reads the environment at import.
RUNTIME_MODULES = (
    "agents.runtime.sink",
    "agents.runtime.outbox",
    "agents.runtime.sender",
    "agents.runtime.process_sink",
    "agents.runtime.checkpoints",
    "agents.runtime.event_files",
    "agents.runtime.export",
    "agents.runtime.flavor",
    "agents.runtime.warm_start",
    "agents.runtime.reporting",
    "agents.runtime.coordinator",
    "agents.runtime.evaluator",
    "agents.runtime.refusal",
    "agents.runtime.server",
    "agents.runtime.step_reads",
    "websockets.sync.client",
)


def preload() -> None:
    """What every task would import first: TensorFlow with tf_keras as tf.keras, and the
    runtime (which a task that never imports it does not miss: the modules only sit there)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401

    import agents.runtime  # noqa: F401

    for name in RUNTIME_MODULES:
        importlib.import_module(name)


def import_at_idle_priority() -> tuple[int, os.sched_param] | None:
    """Import under SCHED_IDLE where the scheduling it had can be given back afterwards (root,
    or an RLIMIT_NICE that allows its nice value): refilling the pool then never takes CPU
    from training on the host. Returns what to restore (None: nothing was changed)."""
    if not hasattr(os, "sched_setscheduler"):
        return None
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    # The kernel's rule for leaving SCHED_IDLE again (can_nice): CAP_SYS_NICE, or the limit.
    if os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_NICE)[0] < 20 - nice:
        return None
    before = (os.sched_getscheduler(0), os.sched_getparam(0))
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    return before


def restore_priority(before: tuple[int, os.sched_param] | None) -> None:
    """Every thread back to the scheduling the process started with (threads the import
    started inherited SCHED_IDLE), before any task can run here."""
    if before is None:
        return
    for thread in procfs.thread_ids():
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setscheduler(thread, *before)


def module_origins() -> dict[str, str | None]:
    """Each imported top-level module and the directory it was found in (None: built in,
    frozen, a namespace package): a module of that name in a task's sys.path[0] elsewhere
    would have been imported instead in a cold start."""
    origins: dict[str, str | None] = {}
    for name, module in list(sys.modules.items()):
        if "." in name or module is None:
            continue
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            origins[name] = None
            continue
        path = Path(file)
        # A package's origin is the directory holding the package, not its __init__'s.
        holder = path.parent.parent if path.stem == "__init__" else path.parent
        origins[name] = str(holder)
    return origins


def read_line(channel: socket.socket) -> bytes:
    """One line from the agent; b"" if it closed the socket first."""
    data = bytearray()
    while b"\n" not in data:
        chunk = channel.recv(65536)  # blocks: an idle warm process uses no CPU
        if not chunk:
            return b""
        data += chunk
        if len(data) > MAX_ASSIGNMENT_BYTES:
            raise ValueError("the assignment is too large")
    return bytes(data[: data.index(b"\n")])


def apply_environment(env: dict[str, str], cwd: str) -> None:
    # os.environ's setters call putenv/unsetenv: TensorFlow's C++ getenv sees the task's values.
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)


def script_main(path: str) -> types.ModuleType:
    """``__main__`` as ``python path`` makes it (Python 3.9+): ``__file__`` is the path made
    absolute without normalising it, and sys.path[0] is the directory of its real path."""
    absolute = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    main = types.ModuleType("__main__")
    main.__file__ = absolute
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", absolute)
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    main.__annotations__ = {}
    sys.path.insert(0, os.path.dirname(os.path.realpath(absolute)))
    sys.modules["__main__"] = main
    return main


def run_script(argv: list[str]) -> None:
    sys.argv = list(argv)
    sys.orig_argv = [sys.executable, *argv]  # what the agent would have exec'd
    main = script_main(argv[0])
    assert main.__file__ is not None
    with io.open_code(main.__file__) as source:  # as the interpreter opens a script
        code = compile(source.read(), main.__file__, "exec", dont_inherit=True)
    exec(code, main.__dict__)  # noqa: S102 - running the task's script is the point


def run_module(name: str, args: list[str]) -> None:
    sys.path.insert(0, os.getcwd())  # `python -m` puts the working dir first
    sys.argv = ["-m", *args]  # runpy replaces argv[0] with the module's file, as -m does
    sys.orig_argv = [sys.executable, "-m", name, *args]
    try:
        found = importlib.util.find_spec(name)
    except ImportError:
        found = None
    if found is None:  # the interpreter's own words for it
        print(f"{sys.executable}: No module named {name}", file=sys.stderr)
        raise SystemExit(1)
    runpy.run_module(name, run_name="__main__", alter_sys=True)


def run_task(assignment: dict[str, Any]) -> None:
    """Run the assigned task here. Its SystemExit leaves as a cold start's would."""
    apply_environment(dict(assignment["env"]), str(assignment["cwd"]))
    argv = [str(arg) for arg in assignment["argv"]]
    try:
        if assignment["mode"] == "module":
            run_module(argv[0], argv[1:])
        else:
            run_script(argv)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        # What the interpreter does with an uncaught exception, less this module's frames
        # at the top of the traceback (a cold start's begins in the task's own code).
        traceback = exc.__traceback__
        while traceback is not None and traceback.tb_frame.f_code.co_filename in _OWN_FILES:
            traceback = traceback.tb_next
        # Some hooks print the exception's own __traceback__ rather than the one given.
        sys.excepthook(type(exc), exc.with_traceback(traceback), traceback)
        raise SystemExit(1) from None


_OWN_FILES = frozenset({__file__, runpy.__file__})


def serve(fd: int) -> None:
    channel = socket.socket(fileno=fd)
    before = import_at_idle_priority()
    preload()
    restore_priority(before)  # an error here ends the process before it is ready: no task
    ready = {"type": "ready", "pid": os.getpid(), "modules": module_origins()}
    channel.sendall(json.dumps(ready).encode() + b"\n")
    line = read_line(channel)
    channel.close()  # the task must not inherit it
    if not line:
        raise SystemExit(EXIT_NO_ASSIGNMENT)
    try:
        assignment = json.loads(line)
        if assignment.get("type") != "assign":
            raise ValueError(f"expected an assignment, got {assignment.get('type')!r}")
    except ValueError as exc:
        print(f"strata: warm process: unusable assignment: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_ASSIGNMENT) from None
    run_task(assignment)
    return None


def main() -> None:
    # `python -m` put the agent's working dir first on sys.path; the task puts its own there.
    del sys.path[0]
    if len(sys.argv) != 3 or sys.argv[1] != CHANNEL_FLAG or not sys.argv[2].isdigit():
        print(f"usage: python -m agents.host.warm {CHANNEL_FLAG} N", file=sys.stderr)
        raise SystemExit(2)
    serve(int(sys.argv[2]))


if __name__ == "__main__":
    main()
