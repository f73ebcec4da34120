"""A small client for the REST API, used by the CLI (and handy in scripts). It answers with
the server's own response models (JobRead, JobPage, HostRead, ...), read from the JSON."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
from pydantic import TypeAdapter, ValidationError

from agents.tls import CA_FILE_ENV, client_ssl
from backend.checkpoints.schemas import CheckpointNow, CheckpointRead
from backend.code.schemas import LIMIT_HEADER as CODE_LIMIT_HEADER
from backend.code.schemas import CodeBundleRead, CodeManifest
from backend.hosts.schemas import HostRead
from backend.jobs.schemas import JobEventRead, JobPage, JobRead, LogPage
from backend.scheduling.quotas import ProjectQuotaRead
from backend.sweeps.schemas import SweepRead, SweepSummary
from backend.teams.schemas import Me, MemberRead, ProjectDetail, ProjectRead, UserRead
from backend.tokens.schemas import TokenCreated, TokenRead

T = TypeVar("T")

DEFAULT_SERVER = "http://127.0.0.1:8000"


class ClientError(Exception):
    """The server refused a request; the message is the server's own explanation."""

    def __init__(self, status_code: int, detail: str, errors: list[dict[str, str]]) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.errors = errors


class ServerUnreachable(Exception):
    """No answer from the server: refused, timed out, or a TLS or DNS failure."""

    def __init__(self, server: str, cause: Exception) -> None:
        super().__init__(f"{server}: {cause or type(cause).__name__}")


class UnexpectedAnswer(ClientError):
    """The server answered, but not with what the route declares (another server version?)."""

    def __init__(self, method: str, path: str, status_code: int, exc: ValidationError) -> None:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "(body)"
        super().__init__(
            status_code,
            f"unexpected answer to {method} {path}: {where}: {error['msg']}",
            [],
        )


class StrataClient:
    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """`transport` replaces the network (tests, or an app served in-process)."""
        self.server = (server or os.environ.get("STRATA_SERVER") or DEFAULT_SERVER).rstrip("/")
        token = token or os.environ.get("STRATA_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify = client_ssl(self.server, os.environ.get(CA_FILE_ENV)) or True
        self._http = httpx.Client(
            base_url=self.server,
            headers=headers,
            timeout=30.0,
            verify=verify,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> StrataClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, answer: TypeAdapter[T], **kwargs: Any) -> T:
        """Send a request and read the answer as the schema the route declares."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(self.server, exc) from exc
        if response.is_error:
            try:
                body = response.json()
            except ValueError:
                body = {"detail": response.text or response.reason_phrase}
            raise ClientError(
                response.status_code, str(body.get("detail")), list(body.get("errors", []))
            )
        if response.status_code == 204:  # no content: the answer must say nothing too
            return answer.validate_python(None)
        try:
            return answer.validate_json(response.content)
        except ValidationError as exc:
            # A server of another version, or something else answering at that address.
            raise UnexpectedAnswer(method, path, response.status_code, exc) from None

    def submit(self, spec_path: Path) -> JobRead:
        content = spec_path.read_bytes()
        suffix = spec_path.suffix.lower()
        content_type = "application/json" if suffix == ".json" else "application/yaml"
        return self._request(
            "POST", "/jobs", _JOB, content=content, headers={"Content-Type": content_type}
        )

    def submit_document(self, document: dict[str, Any]) -> JobRead:
        """Submit a spec already read (and perhaps rewritten, as for code bundles)."""
        return self._request("POST", "/jobs", _JOB, json=document)

    def code_bundle(self, sha256: str) -> tuple[bool, int]:
        """Whether the server has bundle `sha256`, and the largest bundle it takes."""
        try:
            response = self._http.head(f"/code/{sha256}")
        except httpx.TransportError as exc:
            raise ServerUnreachable(self.server, exc) from exc
        if response.status_code not in (200, 404):
            reason = f"HEAD /code/{sha256}: {response.reason_phrase}"
            raise ClientError(response.status_code, reason, [])
        limit = response.headers.get(CODE_LIMIT_HEADER, "")
        if not limit.isdigit():
            raise ClientError(
                response.status_code,
                f"the server does not take code bundles (no {CODE_LIMIT_HEADER} header): "
                "is it an older version?",
                [],
            )
        return response.status_code == 200, int(limit)

    def upload_code(self, sha256: str, body: IO[bytes], size: int) -> CodeBundleRead:
        return self._request(
            "PUT",
            f"/code/{sha256}",
            _CODE,
            content=iter(lambda: body.read(1 << 20), b""),
            headers={"Content-Type": "application/x-tar", "Content-Length": str(size)},
            timeout=600.0,
        )

    def code_manifest(self, sha256: str) -> CodeManifest:
        """What the stored bundle `sha256` holds (ClientError 404 when it is not stored)."""
        return self._request("GET", f"/code/{sha256}/manifest", _MANIFEST)

    def jobs(
        self, *, statuses: list[str], limit: int, offset: int = 0, project: str | None = None
    ) -> JobPage:
        params: dict[str, Any] = {"status": statuses, "limit": limit, "offset": offset}
        if project is not None:
            params["project"] = project
        return self._request("GET", "/jobs", _JOB_PAGE, params=params)

    def job(self, job_id: int) -> JobRead:
        return self._request("GET", f"/jobs/{job_id}", _JOB)

    def cancel(self, job_id: int) -> JobRead:
        return self._request("POST", f"/jobs/{job_id}/cancel", _JOB)

    def restart(self, job_id: int, task: str | None = None) -> JobRead:
        path = f"/jobs/{job_id}/tasks/{task}/restart" if task else f"/jobs/{job_id}/restart"
        return self._request("POST", path, _JOB)

    def suspend(self, job_id: int, *, deadline_seconds: float = 60.0) -> JobRead:
        """Suspend: answers once the job is suspended (after its checkpoint, or the deadline)."""
        return self._request(
            "POST",
            f"/jobs/{job_id}/suspend",
            _JOB,
            params={"deadline_seconds": deadline_seconds},
            timeout=deadline_seconds + 30.0,
        )

    def resume(self, job_id: int) -> JobRead:
        return self._request("POST", f"/jobs/{job_id}/resume", _JOB)

    def checkpoint(self, job_id: int, *, wait_seconds: float = 30.0) -> CheckpointNow:
        """Checkpoint now: answers once the chief has written it."""
        return self._request(
            "POST",
            f"/jobs/{job_id}/checkpoint",
            _CHECKPOINT_NOW,
            params={"wait_seconds": wait_seconds},
            timeout=wait_seconds + 10.0,
        )

    def checkpoints(self, job_id: int, *, include_deleted: bool = False) -> list[CheckpointRead]:
        return self._request(
            "GET",
            f"/jobs/{job_id}/checkpoints",
            _CHECKPOINTS,
            params={"include_deleted": include_deleted},
        )

    def evaluator(self, job_id: int, action: str) -> JobRead:
        return self._request("POST", f"/jobs/{job_id}/evaluator", _JOB, json={"action": action})

    def task_logs(self, job_id: int, task: str, *, tail: int) -> LogPage:
        """The last `tail` log lines of the task's latest attempt."""
        return self._request(
            "GET", f"/jobs/{job_id}/tasks/{task}/logs", _LOG_PAGE, params={"tail": tail}
        )

    def events(self, job_id: int) -> list[JobEventRead]:
        return self._request("GET", f"/jobs/{job_id}/events", _EVENTS)

    def create_sweep(self, spec_path: Path) -> SweepRead:
        """Start a sweep from its spec file (YAML or JSON), sent as it is."""
        content = spec_path.read_bytes()
        suffix = spec_path.suffix.lower()
        content_type = "application/json" if suffix == ".json" else "application/yaml"
        return self._request(
            "POST", "/sweeps", _SWEEP, content=content, headers={"Content-Type": content_type}
        )

    def create_sweep_document(self, document: dict[str, Any]) -> SweepRead:
        """Start a sweep from a spec already read (and perhaps rewritten)."""
        return self._request("POST", "/sweeps", _SWEEP, json=document)

    def sweeps(
        self, *, project: str | None = None, statuses: list[str] | None = None
    ) -> list[SweepSummary]:
        params: dict[str, Any] = {"status": statuses or []}
        if project is not None:
            params["project"] = project
        return self._request("GET", "/sweeps", _SWEEPS, params=params)

    def sweep(self, sweep_id: int) -> SweepRead:
        return self._request("GET", f"/sweeps/{sweep_id}", _SWEEP)

    def stop_sweep(self, sweep_id: int, reason: str | None = None) -> SweepRead:
        body = None if reason is None else {"reason": reason}
        return self._request("POST", f"/sweeps/{sweep_id}/stop", _SWEEP, json=body)

    def create_token(self, name: str, kind: str, expires_in_seconds: int | None) -> TokenCreated:
        body = {"name": name, "kind": kind, "expires_in_seconds": expires_in_seconds}
        return self._request("POST", "/tokens", _TOKEN_CREATED, json=body)

    def tokens(self) -> list[TokenRead]:
        return self._request("GET", "/tokens", _TOKENS)

    def revoke_token(self, token_id: int) -> TokenRead:
        return self._request("DELETE", f"/tokens/{token_id}", _TOKEN)

    def hosts(self) -> list[HostRead]:
        return self._request("GET", "/hosts", _HOSTS)

    def me(self) -> Me:
        return self._request("GET", "/me", TypeAdapter(Me))

    def users(self) -> list[UserRead]:
        return self._request("GET", "/users", TypeAdapter(list[UserRead]))

    def create_user(self, name: str) -> UserRead:
        return self._request("POST", "/users", TypeAdapter(UserRead), json={"name": name})

    def set_user_disabled(self, name: str, disabled: bool) -> UserRead:
        body = {"disabled": disabled}
        return self._request("PATCH", f"/users/{name}", TypeAdapter(UserRead), json=body)

    def create_user_token(
        self, user: str, name: str, expires_in_seconds: int | None
    ) -> TokenCreated:
        body = {"name": name, "expires_in_seconds": expires_in_seconds}
        return self._request("POST", f"/users/{user}/tokens", _TOKEN_CREATED, json=body)

    def projects(self) -> list[ProjectRead]:
        return self._request("GET", "/projects", TypeAdapter(list[ProjectRead]))

    def project(self, name: str) -> ProjectDetail:
        return self._request("GET", f"/projects/{name}", TypeAdapter(ProjectDetail))

    def create_project(
        self, name: str, description: str = "", slurm_account: str | None = None
    ) -> ProjectRead:
        body = {"name": name, "description": description, "slurm_account": slurm_account}
        return self._request("POST", "/projects", TypeAdapter(ProjectRead), json=body)

    def set_quota(
        self,
        project: str,
        *,
        max_gpus: int | None,
        max_priority: int | None,
        may_preempt_other_projects: bool = True,
    ) -> ProjectQuotaRead:
        body = {
            "max_gpus": max_gpus,
            "max_priority": max_priority,
            "may_preempt_other_projects": may_preempt_other_projects,
        }
        return self._request(
            "PUT", f"/projects/{project}/quota", TypeAdapter(ProjectQuotaRead), json=body
        )

    def set_member(self, project: str, user: str, role: str) -> MemberRead:
        return self._request(
            "PUT",
            f"/projects/{project}/members/{user}",
            TypeAdapter(MemberRead),
            json={"role": role},
        )

    def remove_member(self, project: str, user: str) -> None:
        self._request("DELETE", f"/projects/{project}/members/{user}", TypeAdapter(None))

    def forget_host(self, name: str) -> HostRead:
        return self._request("DELETE", f"/hosts/{name}", _HOST)

    def drain_host(self, name: str, *, deadline_seconds: float = 600.0) -> HostRead:
        return self._request(
            "POST",
            f"/hosts/{name}/drain",
            _HOST,
            params={"deadline_seconds": deadline_seconds},
        )

    def undrain_host(self, name: str) -> HostRead:
        return self._request("DELETE", f"/hosts/{name}/drain", _HOST)

    def host_notice(self, name: str, *, seconds: float, reason: str | None = None) -> HostRead:
        params: dict[str, str | float] = {"seconds": seconds}
        if reason:
            params["reason"] = reason
        return self._request("POST", f"/hosts/{name}/notice", _HOST, params=params)

    def cordon_host(self, name: str, *, reason: str) -> HostRead:
        return self._request("POST", f"/hosts/{name}/cordon", _HOST, json={"reason": reason})

    def uncordon_host(self, name: str) -> HostRead:
        return self._request("POST", f"/hosts/{name}/uncordon", _HOST)


# What each route answers (its response_model), read straight from the JSON.
_JOB = TypeAdapter(JobRead)
_CODE = TypeAdapter(CodeBundleRead)
_MANIFEST = TypeAdapter(CodeManifest)
_JOB_PAGE = TypeAdapter(JobPage)
_EVENTS = TypeAdapter(list[JobEventRead])
_LOG_PAGE = TypeAdapter(LogPage)
_CHECKPOINT_NOW = TypeAdapter(CheckpointNow)
_CHECKPOINTS = TypeAdapter(list[CheckpointRead])
_TOKEN = TypeAdapter(TokenRead)
_HOST = TypeAdapter(HostRead)
_TOKEN_CREATED = TypeAdapter(TokenCreated)
_TOKENS = TypeAdapter(list[TokenRead])
_HOSTS = TypeAdapter(list[HostRead])
_SWEEP = TypeAdapter(SweepRead)
_SWEEPS = TypeAdapter(list[SweepSummary])
