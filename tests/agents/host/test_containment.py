"""Containment of real processes: helpers that leave the session, double-forked daemons and
cleared environments still end with their attempt, by cgroup here and by subreaper without."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.host.containment import CgroupContainment, Containments
from agents.host.launcher import LaunchError, TaskProcess
from agents.host.supervisor import Supervisor
from agents.protocol import AgentMessage, StartTask, TaskExited, TaskKey
from tests.support.strict import missing_dependency

KEY = TaskKey(job_id=7, task="worker:1", attempt=2)

# A task that starts a helper in a new session that keeps its stdout, and a double-forked
# daemon whose environment is cleared (neither in its process group nor marked), then exits 0.
ESCAPING = """
import os, subprocess, sys, time
helper = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
print("helper", helper.pid, flush=True)
reader, writer = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(writer, str(os.getpid()).encode())
        os.close(writer)
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"], CLEAN)
    os._exit(0)
os.close(writer)
print("daemon", os.read(reader, 32).decode(), flush=True)
sys.exit(0)
"""


def escaping(clean_env: bool) -> str:
    return ESCAPING.replace("CLEAN", "{}" if clean_env else "dict(os.environ)")


def command(code: str) -> StartTask:
    return StartTask(key=KEY, argv=["python", "-c", code], working_dir=".", env={}, port=1, gpus=[])


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


PROBED: list[Containments] = []


@pytest.fixture(autouse=True)
def _remove_namespaces() -> Iterator[None]:
    yield
    while PROBED:
        PROBED.pop().close()


def probe(**options: bool) -> Containments:
    found = Containments.probe(f"test-{uuid.uuid4().hex[:12]}", **options)
    PROBED.append(found)
    return found


def cgroups(use_v2: bool = True) -> Containments:
    found = probe(use_v2=use_v2)
    if found.killer is None:
        missing_dependency("no cgroups this user can make (needs root or a delegated subtree)")
    return found


async def run_escaping(containments: Containments, clean_env: bool) -> None:
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines), containments.create(KEY))
    await process.spawn(command(escaping(clean_env)), Path.cwd(), "http://server.test")
    started = time.monotonic()
    exit = await asyncio.wait_for(process.wait(), timeout=15)
    assert time.monotonic() - started < 5  # the helper's open stdout does not hold the exit
    assert exit.exit_code == 0, exit.log_tail
    pids = {line.split()[0]: int(line.split()[1]) for line in seen}
    assert set(pids) == {"helper", "daemon"}, seen
    assert not [pid for pid in pids.values() if alive(pid)]
    assert process.left_behind == set()
    if isinstance(process.containment, CgroupContainment):
        assert not process.containment.killer.exists()  # removed once empty


async def test_the_cgroup_holds_helpers_and_daemons_and_ends_them_with_the_main_exit() -> None:
    containments = cgroups()
    if containments.kind != "cgroup2":  # this machine kind has a v2 mount with cgroup.kill
        missing_dependency("no cgroup2 hierarchy with cgroup.kill (Linux 5.14+)")
    await run_escaping(containments, clean_env=True)


async def test_the_v1_freezer_holds_and_ends_them_too() -> None:
    containments = cgroups(use_v2=False)
    if containments.kind != "cgroup1-freezer":
        missing_dependency("no cgroup v1 freezer hierarchy")
    await run_escaping(containments, clean_env=True)


async def test_without_cgroups_the_agent_as_subreaper_ends_and_reaps_them() -> None:
    containments = probe(use_cgroups=False)
    assert containments.kind == "subreaper"
    await run_escaping(containments, clean_env=False)


@pytest.mark.parametrize("use_cgroups", [True, False], ids=["cgroup", "subreaper"])
async def test_stop_kills_what_ignores_sigterm_outside_the_group(use_cgroups: bool) -> None:
    containments = cgroups() if use_cgroups else probe(use_cgroups=False)
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "code = 'import signal, time; signal.signal(15, signal.SIG_IGN); time.sleep(600)'\n"
        "child = subprocess.Popen([sys.executable, '-c', code], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines), containments.create(KEY))
    await process.spawn(command(script), Path.cwd(), "http://server.test")
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.05)
    helper = int(seen[0])
    await process.stop(grace=0.5)
    exit = await asyncio.wait_for(process.wait(), timeout=15)
    assert exit.signal == signal.SIGKILL
    assert not alive(helper)


async def test_a_restarted_agent_ends_what_is_left_of_attempts_it_no_longer_runs() -> None:
    containments = cgroups()
    process = TaskProcess(KEY, lambda _key, _lines: None, containments.create(KEY))
    await process.spawn(command("import time; time.sleep(600)"), Path.cwd(), "http://x.test")
    # The agent that started it is gone (its process watcher too); a new one probes the host.
    again = Containments.probe(containments.namespace)
    assert await again.end_leftovers() == ["job7-worker-1-a2"]
    exit = await asyncio.wait_for(process.wait(), timeout=15)
    assert exit.signal == signal.SIGKILL
    assert not alive(process.pid)
    assert await again.end_leftovers() == []


async def test_a_restarted_agent_without_cgroups_finds_leftovers_by_their_marker() -> None:
    containments = probe(use_cgroups=False)
    process = TaskProcess(KEY, lambda _key, _lines: None, containments.create(KEY))
    await process.spawn(command("import time; time.sleep(600)"), Path.cwd(), "http://x.test")
    await asyncio.sleep(0.3)  # the marker is in its environment once it has exec'd
    again = Containments.probe(containments.namespace, use_cgroups=False)
    assert await again.end_leftovers() == ["job7-worker-1-a2"]
    exit = await asyncio.wait_for(process.wait(), timeout=15)
    assert exit.signal == signal.SIGKILL


async def test_a_task_over_its_memory_limit_is_killed_and_says_so() -> None:
    containments = cgroups()
    if containments.memory is None:
        missing_dependency("no memory cgroup this user can make")
    limit = 64 * 1024 * 1024
    start = command("print('allocating', flush=True); data = b'x' * (512 << 20); print('survived')")
    start = start.model_copy(update={"memory_limit": limit})
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines), containments.create(KEY))
    await process.spawn(start, Path.cwd(), "http://server.test")
    exit = await asyncio.wait_for(process.wait(), timeout=30)
    assert exit.signal == signal.SIGKILL, seen
    assert exit.over_memory_limit == limit
    assert "survived" not in seen


async def test_a_task_within_its_memory_limit_is_not_reported_over_it() -> None:
    containments = cgroups()
    start = command("data = b'x' * (8 << 20)").model_copy(update={"memory_limit": 256 << 20})
    process = TaskProcess(KEY, lambda _key, _lines: None, containments.create(KEY))
    await process.spawn(start, Path.cwd(), "http://server.test")
    exit = await asyncio.wait_for(process.wait(), timeout=30)
    assert (exit.exit_code, exit.over_memory_limit) == (0, None)
    # Its figures, from its cgroups: this machine kind counts CPU in v2, memory in v1.
    assert exit.cpu_seconds is not None and exit.cpu_seconds > 0
    assert exit.memory_peak_bytes is not None and exit.memory_peak_bytes > 8 << 20


async def test_without_a_memory_cgroup_the_task_runs_and_its_log_says_the_limit_is_not_held() -> (
    None
):
    containments = probe(use_cgroups=False)
    start = command("print('ran')").model_copy(update={"memory_limit": 64 << 20})
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines), containments.create(KEY))
    await process.spawn(start, Path.cwd(), "http://server.test")
    exit = await asyncio.wait_for(process.wait(), timeout=30)
    assert exit.exit_code == 0
    assert "cannot enforce the memory limit of 64 MiB" in seen[0] and seen[-1] == "ran"


def zombie_children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                fields = stat[stat.rfind(")") + 2 :].split()
                if fields[0] == "Z" and int(fields[1]) == me:
                    found.append(int(entry.name))
    return found


async def test_the_subreaper_agent_reaps_the_orphans_that_came_back_to_it() -> None:
    sent: list[AgentMessage] = []

    def send(message: AgentMessage) -> bool:
        sent.append(message)
        return True

    containments = probe(use_cgroups=False)
    supervisor = Supervisor(Path.cwd(), "http://server.test", send, containments=containments)
    await supervisor.start(command(escaping(clean_env=False)))
    for _ in range(300):
        if any(isinstance(m, TaskExited) for m in sent):
            break
        await asyncio.sleep(0.05)
    exited = next(m for m in sent if isinstance(m, TaskExited))
    assert exited.exit.exit_code == 0
    # The double fork's middle process exited unwaited: it came back to the agent as a zombie.
    assert zombie_children() == []


async def test_a_task_that_cannot_join_its_cgroup_does_not_start() -> None:
    containments = cgroups()
    containment = containments.create(KEY)
    containment.remove()  # gone before the child could join it
    process = TaskProcess(KEY, lambda _key, _lines: None, containment)
    with pytest.raises(LaunchError, match=f"cannot run 'python' in its {containments.kind} con"):
        await process.spawn(command("print('never')"), Path.cwd(), "http://server.test")
