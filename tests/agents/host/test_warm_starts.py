"""Warm starts: a real warm process (TensorFlow imported) runs a task as a cold start would,
once, in the attempt's containment; the rules that send a start cold."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.host.containment import CgroupContainment
from agents.host.launcher import TaskProcess
from agents.host.supervisor import Supervisor
from agents.host.warm_eligibility import warm_env
from agents.host.warm_pool import WarmPool, start_warm_process
from agents.protocol import AgentMessage, StartTask, TaskExit, TaskKey, TaskStarted
from tests.agents.host.test_containment import ESCAPING, alive, probe

KEY = TaskKey(job_id=3, task="worker:0", attempt=0)
# Warm processes import TensorFlow: out of `make check`.
SLOW = pytest.mark.slow

# What a script can tell about how it was started.
SHOW = """
import json, os, sys
import tensorflow as tf
print(json.dumps({
    "argv": sys.argv, "orig_argv": sys.orig_argv, "file": __file__, "name": __name__,
    "path0": sys.path[0],
    "cwd": os.getcwd(), "mine": os.environ.get("MINE"), "spec": getattr(__spec__, "name", 0),
    "package": __package__, "main": sys.modules["__main__"].__dict__ is globals(),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "gpus": len(tf.config.list_physical_devices("GPU")),
    # Warm processes import at idle priority: every thread of the task runs as cold ones do.
    "sched": sorted({os.sched_getscheduler(int(t)) for t in os.listdir("/proc/self/task")}),
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    # Its own process group, in the agent's session (one scheduling group with the agent).
    "group_led": os.getpgid(0) == os.getpid(), "session": os.getsid(0),
}), flush=True)
sys.exit(int(sys.argv[1]))
"""
FAILS = "def deep():\n    raise ValueError('from the task')\n\ndeep()\n"


def start(*argv: str, env: dict[str, str] | None = None, **fields: object) -> StartTask:
    # As the server sends it: Strata's TF_USE_LEGACY_KERAS, which the warm processes have too.
    env = {"TF_USE_LEGACY_KERAS": "1", **(env or {})}
    return StartTask(key=KEY, argv=list(argv), working_dir=".", env=env, port=1, gpus=[], **fields)


async def run_cold(command: StartTask, workspace: Path) -> tuple[TaskExit, list[str]]:
    lines: list[str] = []
    process = TaskProcess(command.key, lambda _key, new: lines.extend(new))
    await process.spawn(command, workspace, "http://server.test")
    return await process.wait(), lines


async def run_warm(command: StartTask, workspace: Path) -> tuple[TaskExit, list[str], int]:
    warm = await start_warm_process(warm_env(os.environ))
    lines: list[str] = []
    process = TaskProcess(command.key, lambda _key, new: lines.extend(new))
    cwd, env = process.prepare(command, workspace, "http://server.test")
    await process.adopt(warm, command, cwd, env)
    return await process.wait(), lines, warm.pid


def collector(into: list[str]) -> Callable[[TaskKey, list[str]], None]:
    return lambda _key, new: into.extend(new)


def reported(lines: list[str]) -> dict[str, object]:
    found = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(found) == 1, lines
    shown: dict[str, object] = found[0]
    return shown


@SLOW
async def test_a_warm_script_sees_what_a_cold_one_sees(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "show.py").write_text(SHOW)
    (tmp_path / "link.py").symlink_to("sub/show.py")  # sys.path[0] is the real file's dir
    command = start(
        "python", "./link.py", "5", "--flag", env={"MINE": "yes", "CUDA_VISIBLE_DEVICES": ""}
    )
    cold, cold_lines = await run_cold(command, tmp_path)
    warm, warm_lines, _pid = await run_warm(command, tmp_path)
    assert cold.exit_code == warm.exit_code == 5
    shown = reported(warm_lines)
    assert shown == reported(cold_lines)
    assert shown["argv"] == ["./link.py", "5", "--flag"]
    assert shown["file"] == f"{tmp_path}/./link.py"
    assert shown["path0"] == str(tmp_path / "sub")
    assert (shown["name"], shown["main"], shown["visible"], shown["gpus"]) == ("__main__", 1, "", 0)
    assert (shown["group_led"], shown["session"]) == (True, os.getsid(0))


@SLOW
async def test_a_warm_task_finds_the_runtime_it_will_use_imported_already(tmp_path: Path) -> None:
    # What runtime.callbacks() and the ps/worker server import on first use, in a cold start.
    lazy = ["agents.runtime.sender", "agents.runtime.checkpoints", "agents.runtime.coordinator"]
    lazy += ["agents.runtime.sink", "agents.runtime.outbox", "agents.runtime.process_sink"]
    lazy += ["agents.runtime.warm_start", "agents.runtime.server", "websockets.sync.client"]
    script = f"import json, sys\nprint(json.dumps([m for m in {lazy!r} if m not in sys.modules]))\n"
    (tmp_path / "loaded.py").write_text(script)
    finished, lines, _pid = await run_warm(start("python", "loaded.py"), tmp_path)
    assert finished.exit_code == 0, lines
    assert [json.loads(line) for line in lines if line.startswith("[")] == [[]]


@SLOW
async def test_a_warm_module_and_a_failing_script_end_as_cold_ones(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "show.py").write_text(SHOW)
    (tmp_path / "fails.py").write_text(FAILS)
    module = start("python", "-m", "pkg.show", "0", "x")
    cold, cold_lines = await run_cold(module, tmp_path)
    failing = start("python", "fails.py")
    pool = WarmPool(size=2, memory_budget=None)
    pool.start()
    try:
        while len(pool.idle) < 2:
            await asyncio.sleep(0.2)
        first, second = pool.take(), pool.take()
        assert first is not None and second is not None and first.pid != second.pid
        results = []
        for warm, command in ((first, module), (second, failing)):
            lines: list[str] = []
            process = TaskProcess(command.key, collector(lines))
            cwd, env = process.prepare(command, tmp_path, "http://server.test")
            await process.adopt(warm, command, cwd, env)
            results.append((await process.wait(), lines))
            assert not alive(warm.pid)  # it served its one attempt and is gone
    finally:
        await pool.close()
    (module_exit, module_lines), (failed, failed_lines) = results
    assert module_exit.exit_code == cold.exit_code == 0
    shown = reported(module_lines)
    assert shown == reported(cold_lines)
    assert shown["argv"] == [str(tmp_path / "pkg" / "show.py"), "0", "x"]
    assert shown["path0"] == str(tmp_path) and shown["name"] == "__main__"
    cold_failed, cold_failed_lines = await run_cold(failing, tmp_path)
    assert failed.exit_code == cold_failed.exit_code == 1
    # The traceback starts in the task's own code, as a cold one does.
    tail = [line for line in failed_lines if line.startswith(("Traceback", "  File", "Value"))]
    expected = [
        line for line in cold_failed_lines if line.startswith(("Traceback", "  File", "Value"))
    ]
    assert tail == expected and 'fails.py", line 4' in tail[1]


@SLOW
@pytest.mark.parametrize("use_cgroups", [True, False], ids=["cgroup", "subreaper"])
async def test_a_warm_attempt_is_contained_like_a_cold_one(use_cgroups: bool) -> None:
    containments = probe(use_cgroups=use_cgroups)
    if use_cgroups and containments.killer is None:
        pytest.skip("no cgroups this user can make")
    script = Path.cwd() / f"escaping-{os.getpid()}.py"
    # Without cgroups a daemon that clears its environment escapes cold starts too.
    script.write_text(ESCAPING.replace("CLEAN", "{}" if use_cgroups else "dict(os.environ)"))
    try:
        warm = await start_warm_process(warm_env(os.environ))
        seen: list[str] = []
        process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines), containments.create(KEY))
        command = start("python", script.name)
        cwd, env = process.prepare(command, Path.cwd(), "http://server.test")
        await process.adopt(warm, command, cwd, env)
        if isinstance(process.containment, CgroupContainment):
            assert warm.pid in process.containment.procs()
        exit = await asyncio.wait_for(process.wait(), timeout=30)
    finally:
        script.unlink()
    assert exit.exit_code == 0, exit.log_tail
    pids = {line.split()[0]: int(line.split()[1]) for line in seen if line[:1] in "hd"}
    assert set(pids) == {"helper", "daemon"}, seen
    assert not [pid for pid in pids.values() if alive(pid)]
    assert process.left_behind == set()


@SLOW
async def test_the_supervisor_says_how_each_attempt_started(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text("import sys\nsys.exit(int(sys.argv[1]))\n")
    sent: list[AgentMessage] = []

    def send(message: AgentMessage) -> bool:
        sent.append(message)
        return True

    pool = WarmPool(size=1, memory_budget=None)
    supervisor = Supervisor(tmp_path, "http://server.test", send, warm_pool=pool)
    pool.start()
    try:
        while not pool.idle:
            await asyncio.sleep(0.2)
        keys = [KEY.model_copy(update={"attempt": n}) for n in range(4)]
        starts = [
            start("python", "show.py", "0").model_copy(update={"key": keys[0]}),
            # The pool's only process is taken: the next start goes cold.
            start("python", "show.py", "0").model_copy(update={"key": keys[1]}),
            start("python", "show.py", "0", warm_start=False).model_copy(update={"key": keys[2]}),
            start("python", "show.py", "0", env={"TF_CPP_MIN_LOG_LEVEL": "3"}).model_copy(
                update={"key": keys[3]}
            ),
        ]
        for command in starts:
            await supervisor.start(command)
        await supervisor.stop_all(grace=5)
    finally:
        await pool.close()
    how = {m.key.attempt: (m.warm, m.cold_reason) for m in sent if isinstance(m, TaskStarted)}
    assert how[0] == (True, None), how
    assert how[1] == (False, "no warm process was ready")
    assert how[2][0] is False and "warm_start: false" in str(how[2][1])
    assert how[3][0] is False and "TF_CPP_MIN_LOG_LEVEL" in str(how[3][1])


@SLOW
async def test_a_budget_smaller_than_one_warm_process_keeps_none() -> None:
    pool = WarmPool(size=2, memory_budget=1)
    pool.start()
    try:
        while pool.budget_note is None:
            await asyncio.sleep(0.2)
        assert pool.idle == [] and pool.take() is None
        assert "holds 0 of 2 warm processes" in pool.budget_note
    finally:
        await pool.close()


@SLOW
async def test_no_device_is_initialised_before_the_task_says_which_it_may_see(
    tmp_path: Path,
) -> None:
    """CUDA reads CUDA_VISIBLE_DEVICES once, when TensorFlow first initialises it: that must
    happen after the assignment. On a host without a GPU TensorFlow logs its failed cuInit
    then; on one with GPUs, the task sees exactly the devices it was given, as cold."""
    (tmp_path / "show.py").write_text(SHOW)
    warm = await start_warm_process(warm_env(os.environ))
    await asyncio.sleep(1)  # whatever the import would still print
    before = b"".join(data for _, data in warm.early_output)
    assert b"cuInit" not in before and b"Created device" not in before
    for visible in ("", "0"):
        command = start("python", "show.py", "0", env={"CUDA_VISIBLE_DEVICES": visible})
        if visible == "":  # the warm process looked at above
            lines: list[str] = []
            process = TaskProcess(command.key, collector(lines))
            cwd, env = process.prepare(command, tmp_path, "http://server.test")
            await process.adopt(warm, command, cwd, env)
            await process.wait()
        else:
            _exit, lines, _pid = await run_warm(command, tmp_path)
        _cold_exit, cold_lines = await run_cold(command, tmp_path)
        assert reported(lines)["gpus"] == reported(cold_lines)["gpus"], visible
        assert reported(lines)["visible"] == visible


@SLOW
async def test_an_idle_warm_process_that_dies_is_replaced_and_never_handed_out() -> None:
    pool = WarmPool(size=1, memory_budget=None)
    pool.start()
    try:
        while not pool.idle:
            await asyncio.sleep(0.2)
        dead = pool.idle[0]
        os.kill(dead.pid, signal.SIGKILL)
        await dead.protocol.exited
        taken = pool.take()
        assert taken is None or taken.pid != dead.pid
        while not pool.idle and taken is None:
            await asyncio.sleep(0.2)
        fresh = taken or pool.take()
        assert fresh is not None and fresh.pid != dead.pid and fresh.alive
        fresh.discard()
        await fresh.protocol.exited
    finally:
        await pool.close()


def warm_children() -> list[int]:
    """This process's children that are warm processes (started by a pool here)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me and b"agents.host.warm" in argv:
            found.append(int(entry.name))
    return found


@SLOW
async def test_a_pool_closed_while_a_process_imports_leaves_nothing_running() -> None:
    pool = WarmPool(size=1, memory_budget=None)
    pool.start()
    try:
        while not warm_children():  # started, and still importing TensorFlow
            await asyncio.sleep(0.05)
        assert not pool.idle
    finally:
        await pool.close()
    assert [pid for pid in warm_children() if alive(pid)] == []
