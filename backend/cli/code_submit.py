"""What `strata submit` does with a job's code: pack the code dir, upload the bundle when
the server does not have it, and put its digest in the spec in place of the dir."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from backend.code.archive import Bundle, pack
from backend.rest_client import StrataClient


class CodeTooLarge(Exception):
    """The code dir packs into a bundle over the server's limit: nothing was uploaded."""


def read_spec(spec_path: Path) -> Any:
    """The spec document as data (YAML, of which JSON is a part); None when it cannot be
    read as such, for the server to explain."""
    try:
        return yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return None


def code_dir(spec_path: Path, document: Any, override: Path | None) -> Path | None:
    """The dir to bundle: `--code`, else the spec's `code.dir` (relative to the spec file),
    else the spec file's dir when the spec has a `code` section without a digest; None when
    the job runs in the agents' workspace (no `code` section) or names its bundle already."""
    if override is not None:
        return override.resolve()
    code = document.get("code") if isinstance(document, dict) else None
    if not isinstance(code, dict) or ("sha256" in code and "dir" not in code):
        return None
    where = code.get("dir", ".")
    if not isinstance(where, str):
        return None  # the server names the field
    return (spec_path.resolve().parent / where).resolve()


def upload(client: StrataClient, directory: Path, report: Callable[[Bundle, bool], None]) -> str:
    """Pack `directory`, upload it unless the server has it, and answer its digest;
    `report(bundle, uploaded)` says what happened."""
    bundle = pack(directory)
    try:
        known, limit = client.code_bundle(bundle.sha256)
        if not known and bundle.size > limit:
            raise CodeTooLarge(
                f"the code bundle of {directory} is {bundle.size} bytes "
                f"({bundle.files} files); the server takes at most {limit} bytes "
                "(STRATA_MAX_CODE_BYTES): list what is not code (data, outputs, "
                "environments) in .strataignore or .gitignore"
            )
        if not known:
            client.upload_code(bundle.sha256, bundle.file, bundle.size)
        report(bundle, not known)
        return bundle.sha256
    finally:
        bundle.close()


def with_bundle(document: dict[str, Any], sha256: str) -> dict[str, Any]:
    return {**document, "code": {"sha256": sha256}}
