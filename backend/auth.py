"""Bearer tokens: who is calling, and what kind of caller they are.

Tokens are compared in constant time against every known token (so timing reveals neither
which token matched nor how much of one did) and are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import StrEnum

from pydantic import SecretStr


class TokenKind(StrEnum):
    admin = "admin"  # users, the CLI and the dashboard
    viewer = "viewer"  # read only: what admin may GET, and the live streams
    agent = "agent"  # host agents joining the cluster
    task = "task"  # a training process, for its own job only
    job_agent = "job_agent"  # an agent inside one job's allocation (Slurm), for that job only
    user = "user"  # a person: what their roles in their projects allow (backend.teams.access)


@dataclass(frozen=True)
class Principal:
    kind: TokenKind
    job_id: int | None = None  # set for task tokens: the only job they may speak for
    token_id: int | None = None  # set for stored tokens (`strata tokens`): which one
    user_id: int | None = None  # set for user tokens: whose
    user_name: str | None = None

    @property
    def label(self) -> str:
        """Who this is, for logs, events and the audit trail: never the secret."""
        if self.user_name is not None:
            return self.user_name
        if self.token_id is not None:
            return f"{self.kind.value} token {self.token_id}"
        if self.job_id is not None:
            owner = "job agent" if self.kind is TokenKind.job_agent else "task"
            return f"{owner} token of job {self.job_id}"
        return f"{self.kind.value} token (from the server's settings)"


class TokenRegistry:
    """The tokens this server accepts, by kind."""

    def __init__(self, tokens: dict[TokenKind, SecretStr | None]) -> None:
        self._tokens = [
            (kind, secret.get_secret_value().encode())
            for kind, secret in tokens.items()
            if secret is not None and secret.get_secret_value()
        ]

        admin = tokens.get(TokenKind.admin)
        # Task tokens are derived, not stored: HMAC(admin token, job id). Rotating the admin
        # token therefore revokes every task token too.
        self._task_key = (
            hashlib.sha256(b"strata-task-token:" + admin.get_secret_value().encode()).digest()
            if admin is not None and admin.get_secret_value()
            else None
        )

    def task_token(self, job_id: int) -> str:
        if self._task_key is None:
            raise RuntimeError("task tokens need an admin token to derive from")
        return f"st.{job_id}.{self._task_mac(job_id)}"

    def _task_mac(self, job_id: int) -> str:
        assert self._task_key is not None
        return hmac.new(self._task_key, f"job:{job_id}".encode(), hashlib.sha256).hexdigest()

    def job_agent_token(self, job_id: int) -> str:
        """The token the agents started inside this job's allocation join with: it names the
        job, and the agent channel lets it in only while that allocation runs."""
        if self._task_key is None:
            raise RuntimeError("job agent tokens need an admin token to derive from")
        return f"sa.{job_id}.{self._job_agent_mac(job_id)}"

    def _job_agent_mac(self, job_id: int) -> str:
        assert self._task_key is not None
        message = f"job-agent:{job_id}".encode()
        return hmac.new(self._task_key, message, hashlib.sha256).hexdigest()

    def identify(self, token: str) -> Principal | None:
        presented = token.encode()
        found: Principal | None = None
        for kind, known in self._tokens:
            # No early exit: every comparison runs whatever matched before.
            if hmac.compare_digest(presented, known) and found is None:
                found = Principal(kind)
        task = _TASK_TOKEN.fullmatch(token)
        if task and self._task_key is not None and found is None:
            job_id = int(task["job"])
            if hmac.compare_digest(task["mac"].encode(), self._task_mac(job_id).encode()):
                found = Principal(TokenKind.task, job_id=job_id)
        bound = _JOB_AGENT_TOKEN.fullmatch(token)
        if bound and self._task_key is not None and found is None:
            job_id = int(bound["job"])
            if hmac.compare_digest(bound["mac"].encode(), self._job_agent_mac(job_id).encode()):
                found = Principal(TokenKind.job_agent, job_id=job_id)
        return found


_TASK_TOKEN = re.compile(r"st\.(?P<job>[1-9][0-9]{0,18})\.(?P<mac>[0-9a-f]{64})")
_JOB_AGENT_TOKEN = re.compile(r"sa\.(?P<job>[1-9][0-9]{0,18})\.(?P<mac>[0-9a-f]{64})")
