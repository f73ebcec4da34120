"""Task attempts in containers of the job's image (`environment.image`), through the Docker
engine's own client library.

A container is the attempt's containment: host networking (TensorFlow's gRPC ports are the
host's), docker's init as PID 1 (signals reach the task, zombies are reaped), the task's GPUs,
the working dir's tree, the job's checkpoint dir and the termination file mounted at the same
paths as on the host, Strata's runtime on PYTHONPATH from read-only mounts, and a non-root user.
Labels name the agent and the attempt, so that an agent that starts removes every container
of an attempt it does not run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import DeviceRequest, Mount

from agents.environment import TaskEnvironment
from agents.host.runtime_path import RUNTIME_MOUNT, runtime_sources, with_runtime_path
from agents.protocol import TaskKey
from agents.runtime_environment import MAX_IMAGES_ADVERTISED, EngineInfo

log = logging.getLogger(__name__)

LABEL = "io.strata"
AGENT_LABEL = f"{LABEL}.agent"  # the agent's namespace: its identity, name and server
JOB_LABEL = f"{LABEL}.job"
TASK_LABEL = f"{LABEL}.task"
ATTEMPT_LABEL = f"{LABEL}.attempt"
NOBODY = "65534:65534"  # the container user of a root agent
CONTROL_TIMEOUT = 60.0  # seconds for one engine call; output and exit are read without one


class EngineError(Exception):
    """The engine refused or failed a request; the message is its own."""


@dataclass(frozen=True)
class ContainerPlan:
    """What the engine is asked to create: an attempt's container, independent of docker-py."""

    image: str
    argv: list[str]
    working_dir: str
    env: dict[str, str]
    user: str
    labels: dict[str, str]
    mounts: list[tuple[str, str, bool]]  # (host path, container path, read-only)
    gpus: list[int]
    nvidia: bool
    memory_limit: int | None

    def create_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "image": self.image,
            # An image's own ENTRYPOINT would take our argv as its arguments: reset it.
            "entrypoint": [""],
            "command": self.argv,
            "working_dir": self.working_dir,
            "environment": self.env,
            "user": self.user,
            "labels": self.labels,
            "mounts": [
                Mount(target=inside, source=outside, type="bind", read_only=read_only)
                for outside, inside, read_only in self.mounts
            ],
            "network_mode": "host",
            "init": True,
            "stdin_open": False,
            "tty": False,
        }
        if self.memory_limit is not None:
            options["mem_limit"] = self.memory_limit
            options["memswap_limit"] = self.memory_limit  # no swap beyond the limit
        if self.nvidia and self.gpus:
            options["device_requests"] = [
                DeviceRequest(device_ids=[str(gpu) for gpu in self.gpus], capabilities=[["gpu"]])
            ]
        return options


def container_user() -> str:
    """The agent's own user, or nobody when the agent is root: tasks never run as root."""
    uid, gid = os.getuid(), os.getgid()
    return NOBODY if uid == 0 else f"{uid}:{gid}"


def plan_container(
    *,
    key: TaskKey,
    agent: str,
    image: str,
    argv: list[str],
    cwd: Path,
    code_root: Path,
    env: Mapping[str, str],
    gpus: list[int],
    nvidia: bool,
    memory_limit: int | None,
    termination_file: Path,
) -> ContainerPlan:
    """The container for one attempt. `env` is the task's own environment (no host variables:
    the image has its own PATH and Python); the code root and the job's checkpoint dir keep
    their host paths, so that TF_CONFIG, working_dir and checkpoint paths mean the same inside."""
    told = TaskEnvironment.from_env(env)
    inside = dict(env)
    # nobody has no home; Keras and TF write caches there (the container's own /tmp)
    inside.setdefault("HOME", "/tmp")  # noqa: S108
    inside.setdefault("PYTHONUNBUFFERED", "1")
    if nvidia and gpus:
        # The NVIDIA runtime shows a container only its devices, numbered from 0.
        inside[TaskEnvironment.variable("visible_devices")] = ",".join(
            str(n) for n in range(len(gpus))
        )
    with_runtime_path(inside, RUNTIME_MOUNT)
    mounts: list[tuple[str, str, bool]] = [(str(code_root), str(code_root), True)]
    mounts += [
        (str(path), f"{RUNTIME_MOUNT}/{name}", True) for name, path in runtime_sources().items()
    ]
    mounts.append((str(termination_file), str(termination_file), False))
    if told.checkpoint_dir:
        mounts.append((told.checkpoint_dir, told.checkpoint_dir, False))
    if told.warm_start_from:  # another job's checkpoint: its dir, read-only
        source = Path(told.warm_start_from)
        folder = source if source.is_dir() else source.parent
        if folder.is_dir() and str(folder) != told.checkpoint_dir:
            mounts.append((str(folder), str(folder), True))
    if told.ca_file:
        mounts.append((told.ca_file, told.ca_file, True))
    return ContainerPlan(
        image=image,
        argv=list(argv),
        working_dir=str(cwd),
        env=inside,
        user=container_user(),
        labels={
            AGENT_LABEL: agent,
            JOB_LABEL: str(key.job_id),
            TASK_LABEL: key.task,
            ATTEMPT_LABEL: str(key.attempt),
        },
        mounts=mounts,
        gpus=gpus,
        nvidia=nvidia,
        memory_limit=memory_limit,
    )


def exit_status(code: int) -> tuple[int, int | None]:
    """(exit code, signal): docker's init exits 128+N when the task died of signal N."""
    if 128 < code < 128 + signal.NSIG:
        return code, code - 128
    return code, None


class DockerEngine:
    """This host's Docker engine, as the agent uses it. Blocking calls: run them in a thread."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = dict(environ if environ is not None else os.environ)
        self.control = docker.DockerClient(**_client_options(env, CONTROL_TIMEOUT))
        # Output and exits can be quiet for hours: their reads have no timeout.
        self.streams = docker.DockerClient(**_client_options(env, None))

    @classmethod
    def connect(cls, environ: Mapping[str, str] | None = None) -> DockerEngine | None:
        """The engine if one answers (DOCKER_HOST or the default socket), else None."""
        try:
            engine = cls(environ)
            engine.control.ping()
        except docker.errors.DockerException as exc:
            log.info("no container engine: %s", exc)
            return None
        except OSError as exc:
            log.info("no container engine: %s", exc)
            return None
        return engine

    def info(self) -> EngineInfo:
        version = str(self.control.version().get("Version", "unknown"))[:64]
        runtimes = self.control.info().get("Runtimes") or {}
        images = self.control.images.list()
        images.sort(key=lambda image: str(image.attrs.get("Created", "")), reverse=True)
        tags = [tag for image in images for tag in image.tags if len(tag) <= 512]
        return EngineInfo(
            version=version, nvidia="nvidia" in runtimes, images=tags[:MAX_IMAGES_ADVERTISED]
        )

    def containers_of(self, agent: str) -> list[Container]:
        return self.control.containers.list(all=True, filters={"label": f"{AGENT_LABEL}={agent}"})

    def remove_leftovers(self, agent: str, keep: frozenset[str] = frozenset()) -> list[str]:
        """Remove (killing first) every container of this agent but those in `keep` (ids)."""
        removed = []
        for container in self.containers_of(agent):
            if container.id in keep:
                continue
            labels = container.labels
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
            removed.append(
                f"{labels.get(TASK_LABEL)} of job {labels.get(JOB_LABEL)}"
                f" (attempt {labels.get(ATTEMPT_LABEL)}, container {container.short_id})"
            )
        return removed

    def ensure_image(self, image: str) -> None:
        """Pull the image unless the engine has it."""
        try:
            self.control.images.get(image)
        except docker.errors.ImageNotFound:
            log.info("pulling %s", image)
            try:
                self.control.images.pull(image)
            except docker.errors.APIError as exc:
                raise EngineError(
                    f"image {image!r} is not on this host and cannot be pulled: {_explain(exc)}"
                ) from None
        except docker.errors.APIError as exc:
            raise EngineError(_explain(exc)) from None

    def close(self) -> None:
        self.control.close()
        self.streams.close()


def _client_options(env: Mapping[str, str], timeout: float | None) -> dict[str, Any]:
    from docker.utils import kwargs_from_env

    options: dict[str, Any] = dict(kwargs_from_env(environment=dict(env)))
    options.setdefault("base_url", "unix:///var/run/docker.sock")
    options["timeout"] = timeout
    return options


def _explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)[:2000]


class ContainerRun:
    """One attempt's container: created, its output read, its exit awaited, then removed."""

    def __init__(self, engine: DockerEngine, plan: ContainerPlan) -> None:
        self.engine = engine
        self.plan = plan
        self.container: Container | None = None
        self.id = ""
        self.pid = 0

    def start(self, on_output: Callable[[int, bytes], None]) -> threading.Thread:
        """Create, attach and start (blocking); output then flows to `on_output(fd, data)`
        from the returned thread, which ends when the container's output does."""
        self.engine.ensure_image(self.plan.image)
        try:
            self.container = self.engine.control.containers.create(**self.plan.create_options())
            self.id = str(self.container.id)
            stream = self.engine.streams.api.attach(
                self.id, stdout=True, stderr=True, stream=True, demux=True
            )
            reader = threading.Thread(
                target=_pump, args=(stream, on_output), name="container-output", daemon=True
            )
            reader.start()
            self.container.start()
            self.container.reload()
        except docker.errors.APIError as exc:
            self.remove()
            raise EngineError(_explain(exc)) from None
        self.pid = int(self.container.attrs.get("State", {}).get("Pid") or 0)
        return reader

    def wait(self) -> tuple[int, bool]:
        """(status code, killed for memory) once the container has exited (blocking)."""
        assert self.container is not None
        result = self.engine.streams.api.wait(self.id, timeout=None)
        code = int(result.get("StatusCode", -1))
        with contextlib.suppress(docker.errors.APIError):
            self.container.reload()
        oom = bool(self.container.attrs.get("State", {}).get("OOMKilled"))
        return code, oom

    def stop(self, grace: float) -> None:
        """SIGTERM to the task (through docker's init), SIGKILL after the grace (blocking)."""
        if self.container is None:
            return
        try:
            self.engine.streams.api.stop(self.id, timeout=max(0, round(grace)))
        except docker.errors.NotFound:
            pass  # already gone
        except docker.errors.APIError as exc:
            raise EngineError(_explain(exc)) from None

    def remove(self) -> None:
        if self.container is None:
            return
        with contextlib.suppress(docker.errors.NotFound):
            self.container.remove(force=True)


def _pump(
    stream: Iterator[tuple[bytes | None, bytes | None]], on_output: Callable[[int, bytes], None]
) -> None:
    with contextlib.suppress(Exception):  # a stream cut by the engine ends like a closed pipe
        for out, err in stream:
            if out:
                on_output(1, out)
            if err:
                on_output(2, err)
