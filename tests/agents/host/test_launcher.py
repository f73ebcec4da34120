"""Launching real processes: confinement, argv, output capture, exit codes, group stop."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from agents.environment import TaskEnvironment
from agents.host.launcher import (
    LaunchError,
    TaskNote,
    TaskProcess,
    read_termination,
    resolve_argv,
    resolve_working_dir,
    task_env,
)
from agents.host.process import WITHHELD_ENV
from agents.protocol import StartTask, TaskKey
from agents.vocabulary import Role, Strategy, TaskName

KEY = TaskKey(job_id=1, task="chief:0", attempt=0)


def command(*argv: str, working_dir: str = ".", env: dict[str, str] | None = None) -> StartTask:
    return StartTask(
        key=KEY, argv=list(argv), working_dir=working_dir, env=env or {}, port=1, gpus=[]
    )


def test_working_dir_stays_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "escape").symlink_to("/etc")
    assert resolve_working_dir(tmp_path, "jobs") == (tmp_path / "jobs").resolve()
    with pytest.raises(LaunchError, match="leaves the workspace"):
        resolve_working_dir(tmp_path, "escape")
    with pytest.raises(LaunchError, match="leaves the workspace"):
        resolve_working_dir(tmp_path, "../..")
    with pytest.raises(LaunchError, match="does not exist"):
        resolve_working_dir(tmp_path, "missing")


def test_python_means_the_agents_interpreter() -> None:
    assert resolve_argv(["python", "-m", "x"]) == [sys.executable, "-m", "x"]
    assert resolve_argv(["python3", "t.py"]) == [sys.executable, "t.py"]
    assert resolve_argv(["/bin/echo", "hi"]) == ["/bin/echo", "hi"]


async def run(process: TaskProcess, start: StartTask, workspace: Path) -> None:
    await process.spawn(start, workspace, "http://server.test")


async def test_output_env_and_exit_code(tmp_path: Path) -> None:
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines))
    code = (
        "import os, sys; print('out', os.environ['STRATA_SERVER'], os.environ['MINE']);"
        "print('err', file=sys.stderr);"
        "print('agent token:', os.environ.get('STRATA_AGENT_TOKEN'));"
        "sys.exit(4)"
    )
    os.environ["STRATA_AGENT_TOKEN"] = "secret-of-the-agent"
    try:
        await run(process, command("python", "-c", code, env={"MINE": "yes"}), tmp_path)
    finally:
        del os.environ["STRATA_AGENT_TOKEN"]
    exit = await process.wait()
    assert (exit.exit_code, exit.signal) == (4, None)
    assert sorted(seen) == sorted(["out http://server.test yes", "err", "agent token: None"])
    assert exit.log_tail == seen


async def test_a_task_leads_a_process_group_of_its_own_in_the_agents_session(
    tmp_path: Path,
) -> None:
    # A session of its own would be a scheduling group of its own, where the kernel has
    # autogroups: the CPU would then be split per task rather than per thread.
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines))
    code = "import os; print(os.getpgid(0) == os.getpid(), os.getsid(0))"
    await run(process, command("python", "-c", code), tmp_path)
    assert (await process.wait()).exit_code == 0
    assert seen == [f"True {os.getsid(0)}"]


async def test_stop_reaches_the_whole_group_and_escalates(tmp_path: Path) -> None:
    # A parent that ignores SIGTERM, with a child that would outlive it.
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines))
    await run(process, command("python", "-c", script), tmp_path)
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.05)
    child = int(seen[0])
    await process.stop(grace=0.5)
    exit = await process.wait()
    assert (exit.exit_code, exit.signal) == (128 + signal.SIGKILL, signal.SIGKILL)
    for _ in range(50):
        if not alive(child):
            break
        await asyncio.sleep(0.1)
    assert not alive(child)  # the grandchild went with its group


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


async def test_missing_program_is_a_launch_error(tmp_path: Path) -> None:
    process = TaskProcess(KEY, lambda _key, _lines: None)
    with pytest.raises(LaunchError, match="cannot run 'no-such-program-x'"):
        await run(process, command("no-such-program-x"), tmp_path)


@pytest.mark.parametrize(
    ("relative", "words"),
    [
        ("/etc", "working_dir must be relative to the workspace"),
        ("a\x00b", "working_dir must not contain NUL bytes"),
        ("jobs/../../..", "leaves the workspace"),
        ("inside/escape", "leaves the workspace"),  # a symlink deeper down, pointing out
    ],
)
def test_each_working_dir_escape_is_a_launch_error(
    tmp_path: Path, relative: str, words: str
) -> None:
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    (workspace / "jobs").mkdir(parents=True)
    (workspace / "inside").mkdir()
    outside.mkdir()
    (workspace / "inside" / "escape").symlink_to(outside)
    with pytest.raises(LaunchError, match=words):
        resolve_working_dir(workspace, relative)


def test_a_symlink_that_stays_in_the_workspace_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert resolve_working_dir(tmp_path, "alias") == (tmp_path / "real").resolve()


async def test_spawn_refuses_an_escaping_working_dir_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    process = TaskProcess(KEY, lambda _key, _lines: None)
    with pytest.raises(LaunchError, match="leaves the workspace"):
        await process.spawn(
            command("touch", str(marker), working_dir="../"), tmp_path / "ws", "http://x"
        )
    assert not marker.exists()


def test_a_task_env_is_the_agents_less_credentials_plus_the_start_message_and_the_server() -> None:
    inherited = {"PATH": "/bin", "PYTHONUNBUFFERED": "0"} | {
        name: "secret" for name in WITHHELD_ENV
    }
    told = TaskEnvironment(
        job_id=3, task=TaskName(Role.ps, 0), attempt=1, strategy=Strategy.parameter_server
    )
    env = task_env(inherited, {**told.to_env(), "MINE": "yes"}, "http://s.test", "/ca.pem")
    assert not set(WITHHELD_ENV) & set(env)
    assert env["PATH"] == "/bin" and env["MINE"] == "yes"
    assert env["PYTHONUNBUFFERED"] == "0"  # the agent's choice stays
    read = TaskEnvironment.from_env(env)
    assert read == told.model_copy(update={"server": "http://s.test", "ca_file": "/ca.pem"})
    # Without a CA file of its own the agent hands on none.
    assert TaskEnvironment.from_env(task_env({}, {}, "http://s.test", None)).ca_file is None
    assert task_env({}, {}, "http://s.test", None)["PYTHONUNBUFFERED"] == "1"


def test_a_task_reconnects_to_a_restarted_peer_quickly_unless_its_job_says_otherwise() -> None:
    env = task_env({}, {}, "http://s.test", None)
    options = dict(o.split("=") for o in env["TF_GRPC_DEFAULT_OPTIONS"].split(","))
    # TensorFlow's own cap is 1 s between attempts: a restarted worker waited up to that long.
    assert int(options["grpc.max_reconnect_backoff_ms"]) <= 250
    assert "grpc.min_reconnect_backoff_ms" not in options  # the connect timeout stays
    own = task_env({}, {"TF_GRPC_DEFAULT_OPTIONS": "grpc.keepalive_time_ms=1"}, "http://x", None)
    assert own["TF_GRPC_DEFAULT_OPTIONS"] == "grpc.keepalive_time_ms=1"


async def test_an_unusable_task_environment_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    process = TaskProcess(KEY, lambda _key, _lines: None)
    start = command("touch", str(marker), env={"STRATA_TASK": "boss:0", "STRATA_ATTEMPT": "x"})
    with pytest.raises(LaunchError, match=r"STRATA_TASK='boss:0'.*STRATA_ATTEMPT='x'"):
        await process.spawn(start, tmp_path, "http://x")
    assert not marker.exists()


async def test_a_refusal_written_by_the_runtime_comes_back_with_the_exit(tmp_path: Path) -> None:
    process = TaskProcess(KEY, lambda _key, _lines: None)
    code = (
        "from agents.runtime.refusal import refuse; "
        "refuse('Keras 3 cannot train under multi_worker_mirrored')"
    )
    await run(process, command("python", "-c", code), tmp_path)
    path = Path(process._termination_file or "")
    exit = await process.wait()
    assert exit.exit_code == 78
    assert exit.refused == "Keras 3 cannot train under multi_worker_mirrored"
    assert not path.exists()  # read once, then removed


async def test_an_ordinary_exit_carries_no_refusal(tmp_path: Path) -> None:
    process = TaskProcess(KEY, lambda _key, _lines: None)
    await run(process, command("python", "-c", "raise SystemExit(78)"), tmp_path)
    exit = await process.wait()
    assert (exit.exit_code, exit.refused, exit.interrupted) == (78, None, None)


async def test_a_save_on_a_stop_signal_comes_back_as_an_interruption(tmp_path: Path) -> None:
    process = TaskProcess(KEY, lambda _key, _lines: None)
    code = "from agents.runtime.refusal import exit_interrupted; exit_interrupted('saved at 7')"
    await run(process, command("python", "-c", code), tmp_path)
    exit = await process.wait()
    assert (exit.exit_code, exit.refused, exit.interrupted) == (42, None, "saved at 7")


@pytest.mark.parametrize("written", [b"", b"not json", b"[1, 2]", b'{"reason": ""}'])
def test_a_termination_file_without_a_note_says_nothing(tmp_path: Path, written: bytes) -> None:
    path = tmp_path / "termination.json"
    path.write_bytes(written)
    assert read_termination(path) == TaskNote()
    assert read_termination(None) == TaskNote()


@pytest.mark.parametrize("own_stops_only", [True, False])
async def test_an_agent_that_gives_notice_marks_its_own_stop_first(
    tmp_path: Path, own_stops_only: bool
) -> None:
    """The attempt's stop file exists when, and only when, the agent sends its SIGTERM."""
    script = (
        "import os, signal, sys, time\n"
        "path = os.environ.get('STRATA_STOP_FILE')\n"
        "def stopped(*_):\n"
        "    print('stopped', path is not None and os.path.exists(path), flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stopped)\n"
        "print('started', path is not None and os.path.exists(path), flush=True)\n"
        "time.sleep(600)\n"
    )
    seen: list[str] = []
    process = TaskProcess(
        KEY, lambda _key, lines: seen.extend(lines), own_stops_only=own_stops_only
    )
    await run(process, command("python", "-c", script), tmp_path)
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.05)
    await process.stop(grace=10)
    exit = await process.wait()
    assert exit.exit_code == 0
    assert seen == ["started False", f"stopped {own_stops_only}"]
    stop_file = process._stop_file
    assert (stop_file is not None) == own_stops_only
    assert stop_file is None or not stop_file.exists()  # removed with the attempt
