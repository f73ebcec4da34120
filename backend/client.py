"""A small client for the REST API, used by the CLI (and handy in scripts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from agents.tls import CA_FILE_ENV, client_ssl

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


class StrataClient:
    def __init__(self, server: str | None = None, token: str | None = None) -> None:
        self.server = (server or os.environ.get("STRATA_SERVER") or DEFAULT_SERVER).rstrip("/")
        token = token or os.environ.get("STRATA_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify = client_ssl(self.server, os.environ.get(CA_FILE_ENV)) or True
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=30.0, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> StrataClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
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
        return response.json()

    def submit(self, spec_path: Path) -> dict[str, Any]:
        content = spec_path.read_bytes()
        suffix = spec_path.suffix.lower()
        content_type = "application/json" if suffix == ".json" else "application/yaml"
        result: dict[str, Any] = self._request(
            "POST", "/jobs", content=content, headers={"Content-Type": content_type}
        )
        return result

    def jobs(self, *, statuses: list[str], limit: int, offset: int = 0) -> dict[str, Any]:
        params: dict[str, Any] = {"status": statuses, "limit": limit, "offset": offset}
        result: dict[str, Any] = self._request("GET", "/jobs", params=params)
        return result

    def job(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", f"/jobs/{job_id}")
        return result

    def cancel(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", f"/jobs/{job_id}/cancel")
        return result

    def restart(self, job_id: int, task: str | None = None) -> dict[str, Any]:
        path = f"/jobs/{job_id}/tasks/{task}/restart" if task else f"/jobs/{job_id}/restart"
        result: dict[str, Any] = self._request("POST", path)
        return result

    def checkpoint(self, job_id: int, *, wait_seconds: float = 30.0) -> dict[str, Any]:
        """Checkpoint now: answers once the chief has written it."""
        result: dict[str, Any] = self._request(
            "POST",
            f"/jobs/{job_id}/checkpoint",
            params={"wait_seconds": wait_seconds},
            timeout=wait_seconds + 10.0,
        )
        return result

    def checkpoints(self, job_id: int, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request(
            "GET", f"/jobs/{job_id}/checkpoints", params={"include_deleted": include_deleted}
        )
        return result

    def evaluator(self, job_id: int, action: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", f"/jobs/{job_id}/evaluator", json={"action": action}
        )
        return result

    def events(self, job_id: int) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", f"/jobs/{job_id}/events")
        return result

    def create_token(self, name: str, kind: str, expires_in_seconds: int | None) -> dict[str, Any]:
        body = {"name": name, "kind": kind, "expires_in_seconds": expires_in_seconds}
        result: dict[str, Any] = self._request("POST", "/tokens", json=body)
        return result

    def tokens(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "/tokens")
        return result

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._request("DELETE", f"/tokens/{token_id}")
        return result

    def hosts(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "/hosts")
        return result
