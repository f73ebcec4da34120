"""One task attempt run in a container (environment.image), with the same life as a process:
spawn, output lines, wait for its exit, stop with a grace period."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from agents.environment import TaskEnvironment
from agents.host.containers import (
    NOBODY,
    ContainerRun,
    DockerEngine,
    EngineError,
    exit_status,
    plan_container,
)
from agents.host.launcher import (
    DRAIN_SECONDS,
    LaunchError,
    TaskOutput,
    new_termination_file,
    read_termination,
    resolve_working_dir,
    task_env,
)
from agents.host.lifelong_calls import in_own_thread
from agents.protocol import MAX_LOG_LINE, StartTask, TaskExit, TaskKey

log = logging.getLogger(__name__)


class ContainerTask:
    """An attempt in a container of the job's image; the container is its containment."""

    def __init__(
        self,
        key: TaskKey,
        on_lines: Callable[[TaskKey, list[str]], None],
        engine: DockerEngine,
        agent: str,
        nvidia: bool = False,
        line_limit: int = MAX_LOG_LINE,
    ) -> None:
        self.key = key
        self.output = TaskOutput(key, on_lines, line_limit)
        self._engine = engine
        self._agent = agent
        self._nvidia = nvidia
        self._run: ContainerRun | None = None
        self._reader: asyncio.Future[None] | None = None
        self._exited = asyncio.Event()
        self._termination_file: Path | None = None
        self.stop_requested = False
        self.left_behind: set[int] = set()

    @property
    def pid(self) -> int:
        return self._run.pid if self._run is not None else 0

    async def spawn(
        self, command: StartTask, workspace: Path, server_url: str, ca_file: str | None = None
    ) -> None:
        assert command.environment is not None and command.environment.image is not None
        cwd = resolve_working_dir(workspace, command.working_dir)
        # Only the task's own variables: the image has its own PATH, Python and locale.
        env = task_env({}, command.env, server_url, ca_file)
        self._termination_file = new_termination_file()
        env[TaskEnvironment.variable("termination_file")] = str(self._termination_file)
        plan = plan_container(
            key=self.key,
            agent=self._agent,
            image=command.environment.image,
            argv=command.argv,
            cwd=cwd,
            code_root=resolve_working_dir(workspace, "."),
            env=env,
            gpus=command.gpus,
            nvidia=self._nvidia,
            memory_limit=command.memory_limit,
            termination_file=self._termination_file,
        )
        self._share_writable(plan.user, TaskEnvironment.from_env(env).checkpoint_dir)
        loop = asyncio.get_running_loop()
        self._run = ContainerRun(self._engine, plan)

        def on_output(fd: int, data: bytes) -> None:  # called from the reader thread
            loop.call_soon_threadsafe(self.output.feed, fd, data)

        try:
            reader = await asyncio.to_thread(self._run.start, on_output)
        except EngineError as exc:
            raise LaunchError(f"cannot run image {command.environment.image!r}: {exc}") from None
        self._reader = in_own_thread(reader.join, f"{self.key.task}-output")

    def _share_writable(self, user: str, checkpoint_dir: str | None) -> None:
        """A root agent's task runs as nobody: it must still write its checkpoints and its
        termination file."""
        if user != NOBODY:
            return
        uid, gid = (int(part) for part in NOBODY.split(":"))
        assert self._termination_file is not None
        os.chown(self._termination_file, uid, gid)
        if checkpoint_dir:
            root = Path(checkpoint_dir)
            root.mkdir(parents=True, exist_ok=True)
            if root.stat().st_uid == uid:
                return  # given before: what its containers wrote since is nobody's already
            for folder, _, files in os.walk(checkpoint_dir):
                os.chown(folder, uid, gid)
                for name in files:
                    os.chown(os.path.join(folder, name), uid, gid)

    async def wait(self) -> TaskExit:
        assert self._run is not None
        try:
            status, oom = await in_own_thread(self._run.wait, f"{self.key.task}-wait")
        finally:
            self._exited.set()
        if self._reader is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_SECONDS):
                    await asyncio.shield(self._reader)
        await asyncio.sleep(0)  # output the reader handed over just before it ended
        self.output.close()
        await asyncio.to_thread(self._run.remove)
        code, died_of = exit_status(status)
        note = read_termination(self._termination_file)
        return TaskExit(
            key=self.key,
            exit_code=code,
            signal=died_of,
            refused=note.refused,
            interrupted=note.interrupted,
            log_tail=list(self.output.tail),
            over_memory_limit=self._run.plan.memory_limit if oom else None,
        )

    async def abandon(self) -> None:
        """It never started: remove what was made for it."""
        if self._termination_file is not None:
            self._termination_file.unlink(missing_ok=True)
        if self._run is not None:
            await asyncio.to_thread(self._run.remove)

    async def stop(self, grace: float) -> None:
        """`docker stop`: SIGTERM through docker's init, SIGKILL once the grace is over."""
        if self._run is None or self._exited.is_set():
            return
        self.stop_requested = True
        try:
            await asyncio.to_thread(self._run.stop, grace)
        except EngineError as exc:
            log.warning("stopping %s of job %s: %s", self.key.task, self.key.job_id, exc)
