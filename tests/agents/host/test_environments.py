"""Where a task runs: under another interpreter with Strata's runtime lent to it, and the
container an agent asks its engine for (the plan; the engine itself is tests/e2e)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from agents.environment import TaskEnvironment
from agents.host.container_task import ContainerTask
from agents.host.containers import (
    AGENT_LABEL,
    ATTEMPT_LABEL,
    JOB_LABEL,
    NOBODY,
    TASK_LABEL,
    ContainerPlan,
    exit_status,
    plan_container,
)
from agents.host.launcher import LaunchError, TaskProcess, resolve_argv
from agents.host.runtime_path import (
    AGENT_PYTHON,
    RUNTIME_MOUNT,
    RUNTIME_PACKAGES,
    host_runtime_dir,
    runtime_sources,
)
from agents.host.supervisor import Supervisor
from agents.protocol import StartTask, TaskExited, TaskKey
from agents.runtime_environment import RuntimeEnvironment
from tests.support.strict import missing_dependency

KEY = TaskKey(job_id=7, task="worker:1", attempt=2)
# Debian's own Python: another interpreter than the agent's venv, without pydantic.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin")


def start(*argv: str, python: str | None = None, image: str | None = None) -> StartTask:
    return StartTask(
        key=KEY,
        argv=list(argv),
        working_dir=".",
        env={},
        port=1,
        gpus=[],
        environment=RuntimeEnvironment(python=python, image=image),
    )


def test_python_in_the_argv_means_the_jobs_interpreter_when_it_names_one() -> None:
    assert resolve_argv(["python", "t.py"], "/opt/env/bin/python") == [
        "/opt/env/bin/python",
        "t.py",
    ]
    assert resolve_argv(["python", "t.py"]) == [sys.executable, "t.py"]
    assert resolve_argv(["/bin/echo", "python"], "/opt/env/bin/python") == ["/bin/echo", "python"]


def test_the_lent_runtime_is_every_package_it_imports() -> None:
    sources = runtime_sources()
    names = {name.removesuffix(".py") for name in sources}
    assert names == set(RUNTIME_PACKAGES)
    assert all(path.exists() for path in sources.values())
    folder = host_runtime_dir()
    assert sorted(p.name for p in folder.iterdir()) == sorted(sources)
    assert host_runtime_dir() == folder  # made once


async def test_another_interpreter_runs_the_task_with_the_runtime_lent(tmp_path: Path) -> None:
    if SYSTEM_PYTHON is None:
        missing_dependency("no /usr/bin/python3 (Debian's python3) to stand for another env")
    seen: list[str] = []
    process = TaskProcess(KEY, lambda _key, lines: seen.extend(lines))
    # Debian's Python has no pydantic: agents.environment imports only through the loan.
    code = "import sys, agents.environment; print('ran', sys.executable)"
    await process.spawn(start("python", "-c", code, python=SYSTEM_PYTHON), tmp_path, "http://s")
    exit = await process.wait()
    assert exit.exit_code == 0, seen
    assert f"ran {SYSTEM_PYTHON}" in seen
    version_warning = [line for line in seen if "the runtime this agent lends" in line]
    assert not version_warning or AGENT_PYTHON not in version_warning[0].split(";")[0]


async def test_an_interpreter_that_is_not_there_starts_nothing(tmp_path: Path) -> None:
    process = TaskProcess(KEY, lambda _key, _lines: None)
    with pytest.raises(LaunchError, match="/no/such/python is not an executable file"):
        await process.spawn(start("python", "-V", python="/no/such/python"), tmp_path, "http://s")


async def test_an_image_on_a_host_without_an_engine_fails_with_the_reason(tmp_path: Path) -> None:
    sent: list[object] = []

    def send(message: object) -> bool:
        sent.append(message)
        return True

    supervisor = Supervisor(tmp_path, "http://s", send)
    await supervisor.start(start("python", "t.py", image="tensorflow/tensorflow:2.21.0"))
    exits = [m.exit for m in sent if isinstance(m, TaskExited)]
    assert len(exits) == 1
    assert exits[0].error == (
        "this host has no container engine to run image 'tensorflow/tensorflow:2.21.0'"
    )


def plan(tmp_path: Path, *, nvidia: bool, gpus: list[int]) -> ContainerPlan:
    code = tmp_path / "bundle"
    code.mkdir()
    env = TaskEnvironment(
        checkpoint_dir=str(tmp_path / "ckpt" / "job-7"),
        visible_devices=TaskEnvironment.device_list(gpus),
    ).to_env()
    return plan_container(
        key=KEY,
        agent="abc.box-0-1234",
        image="strata-tf:local",
        argv=["python", "train.py"],
        cwd=code,
        code_root=code,
        env={**env, "MINE": "1", "PYTHONPATH": "/job/lib"},
        gpus=gpus,
        nvidia=nvidia,
        memory_limit=2 << 30,
        termination_file=tmp_path / "term.json",
    )


def test_a_container_keeps_host_paths_lends_the_runtime_and_is_labelled(tmp_path: Path) -> None:
    planned = plan(tmp_path, nvidia=False, gpus=[2, 3])
    options = planned.create_options()
    assert options["entrypoint"] == [""] and options["command"] == ["python", "train.py"]
    assert options["network_mode"] == "host" and options["init"] is True
    assert options["user"] == NOBODY  # the tests run as root: never root in the container
    assert options["labels"] == {
        AGENT_LABEL: "abc.box-0-1234",
        JOB_LABEL: "7",
        TASK_LABEL: "worker:1",
        ATTEMPT_LABEL: "2",
    }
    env = options["environment"]
    assert env["PYTHONPATH"] == f"{RUNTIME_MOUNT}:/job/lib"  # the runtime first
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"  # no NVIDIA runtime: the host's indices
    assert env["MINE"] == "1" and env["HOME"] == "/tmp"
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"]) for m in options["mounts"]}
    assert mounts[str(tmp_path / "bundle")] == (str(tmp_path / "bundle"), True)
    assert mounts[str(tmp_path / "ckpt" / "job-7")] == (str(tmp_path / "ckpt" / "job-7"), False)
    assert mounts[str(tmp_path / "term.json")] == (str(tmp_path / "term.json"), False)
    assert mounts[f"{RUNTIME_MOUNT}/agents"][1] is True
    assert options["mem_limit"] == options["memswap_limit"] == 2 << 30
    assert "device_requests" not in options


def test_with_the_nvidia_runtime_gpus_are_device_requests_numbered_from_zero(
    tmp_path: Path,
) -> None:
    options = plan(tmp_path, nvidia=True, gpus=[2, 3]).create_options()
    (request,) = options["device_requests"]
    assert request["DeviceIDs"] == ["2", "3"] and request["Capabilities"] == [["gpu"]]
    assert options["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_docker_inits_exit_codes_read_as_signals() -> None:
    assert exit_status(0) == (0, None)
    assert exit_status(3) == (3, None)
    assert exit_status(128 + signal.SIGKILL) == (137, signal.SIGKILL)
    assert exit_status(128 + signal.SIGTERM) == (143, signal.SIGTERM)
    assert exit_status(255) == (255, None)


def test_a_warm_start_from_another_jobs_checkpoint_is_mounted_read_only(tmp_path: Path) -> None:
    other = tmp_path / "ckpt" / "job-3"
    other.mkdir(parents=True)
    (other / "ckpt-8.index").write_text("")
    code = tmp_path / "code"
    code.mkdir()
    env = TaskEnvironment(
        checkpoint_dir=str(tmp_path / "ckpt" / "job-7"), warm_start_from=str(other / "ckpt-8")
    ).to_env()
    planned = plan_container(
        key=KEY,
        agent="a",
        image="tf:2",
        argv=["python", "t.py"],
        cwd=code,
        code_root=code,
        env=env,
        gpus=[],
        nvidia=False,
        memory_limit=None,
        termination_file=tmp_path / "t.json",
    )
    assert (str(other), str(other), True) in planned.mounts


async def test_a_root_agent_gives_the_checkpoint_dir_to_the_container_user_once(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        missing_dependency("giving files to nobody needs root, as a root agent has")
    task = ContainerTask(KEY, lambda _key, _lines: None, engine=None, agent="a")  # type: ignore[arg-type]
    task._termination_file = tmp_path / "t.json"
    task._termination_file.write_text("")
    checkpoints = tmp_path / "ckpt" / "job-7"
    (checkpoints / "backup").mkdir(parents=True)
    (checkpoints / "backup" / "old.index").write_text("")  # written by a cold attempt, as root
    task._share_writable(NOBODY, str(checkpoints))
    nobody = int(NOBODY.split(":")[0])
    owners = {p.stat().st_uid for p in [checkpoints, *checkpoints.rglob("*")]}
    assert owners == {nobody} and task._termination_file.stat().st_uid == nobody
    (checkpoints / "mine").write_text("")  # the agent's own file: not walked over again
    task._share_writable(NOBODY, str(checkpoints))
    assert (checkpoints / "mine").stat().st_uid == 0
