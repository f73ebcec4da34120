"""Commands to agents: built inside a transaction, sent after it commits, throttled."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agents.protocol import ServerMessage, StartTask, StopTask, TaskKey
from backend.auth import TokenRegistry
from backend.config import Settings
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.scheduling.hub import AgentHub
from backend.scheduling.launch import start_message

RESEND_SECONDS = 5.0  # how long an unanswered start or stop waits before it is sent again


def task_key(task: Task) -> TaskKey:
    return TaskKey(job_id=task.job_id, task=task.name, attempt=task.attempt)


@dataclass
class Outbox:
    """Commands decided inside a transaction, sent only once it has committed."""

    messages: list[tuple[str, ServerMessage]] = field(default_factory=list)

    def add(self, host: str, message: ServerMessage) -> None:
        self.messages.append((host, message))


class Commands:
    """Makes start and stop commands, and remembers when each was last sent."""

    def __init__(self, *, settings: Settings, tokens: TokenRegistry, hub: AgentHub) -> None:
        self.settings = settings
        self.tokens = tokens
        self.hub = hub
        self._sent: dict[tuple[str, TaskKey], float] = {}
        self._prune_above = 1024

    def due(self, kind: str, key: TaskKey, *, force: bool = False) -> bool:
        """Whether a command of this kind for this attempt may be sent (again) now."""
        now = time.monotonic()
        if not force and now - self._sent.get((kind, key), -RESEND_SECONDS) < RESEND_SECONDS:
            return False
        self._sent[(kind, key)] = now
        if len(self._sent) > self._prune_above:
            # Entries older than the resend period decide nothing: without this the map
            # kept every command ever sent.
            self._sent = {k: t for k, t in self._sent.items() if now - t < RESEND_SECONDS}
            self._prune_above = max(1024, 2 * len(self._sent))
        return True

    def start(
        self, outbox: Outbox, host: str, job: Job, task: Task, *, force: bool = False
    ) -> None:
        key = task_key(task)
        if self.due("start", key, force=force):
            outbox.add(host, self.start_message(job, task))

    def start_message(self, job: Job, task: Task) -> StartTask:
        assert task.port is not None and task.tf_config is not None
        return start_message(
            spec=JobSpec.model_validate(job.spec, strict=False),
            key=task_key(task),
            port=task.port,
            gpus=list(task.gpu_indices),
            tf_config=task.tf_config,
            task_token=self.tokens.task_token(job.id),
            checkpoint_root=self.settings.checkpoints,
        )

    def stop(
        self, outbox: Outbox, host: str, key: TaskKey, reason: str, *, force: bool = False
    ) -> None:
        if self.due("stop", key, force=force):
            grace = self.settings.stop_grace_seconds
            outbox.add(host, StopTask(key=key, grace_seconds=grace, reason=reason))

    def send(self, outbox: Outbox) -> None:
        for host, message in outbox.messages:
            self.hub.send(host, message)
