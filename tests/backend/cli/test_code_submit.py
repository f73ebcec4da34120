"""`strata submit` with a code dir, against a real server process: the bundle is uploaded
once, the job names it, and a code dir over the server's limit is refused before any upload."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backend.cli.code_submit import CodeTooLarge, code_dir, read_spec, upload, with_bundle
from backend.code.archive import Bundle
from backend.rest_client import ClientError, StrataClient
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.cli import run_strata
from tests.support.factories import make_spec
from tests.support.processes import strata_server

LIMIT = 64 << 10
ENV = {
    "STRATA_API_TOKEN": ADMIN_TOKEN,
    "STRATA_AGENT_TOKEN": AGENT_TOKEN,
    "STRATA_MAX_CODE_BYTES": str(LIMIT),
}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with strata_server(tmp_path_factory.mktemp("code") / "data", ENV) as url:
        yield url


@pytest.fixture
def client(server_url: str) -> Iterator[StrataClient]:
    with StrataClient(server_url, ADMIN_TOKEN) as strata:
        yield strata


def project(root: Path, **code: str) -> Path:
    root.mkdir(parents=True)
    (root / "train.py").write_text(f"print({str(root)!r})\n")
    spec = root / "job.yaml"
    spec.write_text(yaml.safe_dump(make_spec("mirrored", code=code)))
    return spec


def test_a_bundle_is_uploaded_once_and_the_job_names_it(
    client: StrataClient, tmp_path: Path
) -> None:
    spec = project(tmp_path / "proj")
    document = read_spec(spec)
    directory = code_dir(spec, document, None)
    assert directory == (tmp_path / "proj").resolve()
    seen: list[tuple[int, bool]] = []

    def report(bundle: Bundle, uploaded: bool) -> None:
        seen.append((bundle.files, uploaded))

    first = upload(client, directory, report)
    again = upload(client, directory, report)
    assert first == again
    assert seen == [(2, True), (2, False)]
    job = client.submit_document(with_bundle(document, first))
    assert job.spec.code is not None and job.spec.code.sha256 == first


def test_code_dir_is_relative_to_the_spec_and_code_overrides_it(tmp_path: Path) -> None:
    spec = project(tmp_path / "proj", dir="src")
    assert code_dir(spec, read_spec(spec), None) == (tmp_path / "proj" / "src").resolve()
    assert code_dir(spec, read_spec(spec), tmp_path) == tmp_path.resolve()
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(make_spec("mirrored")))
    assert code_dir(plain, read_spec(plain), None) is None  # runs in the agents' workspace


def test_a_code_dir_over_the_limit_is_refused_before_upload(
    client: StrataClient, tmp_path: Path
) -> None:
    spec = project(tmp_path / "big")
    (tmp_path / "big" / "weights.bin").write_bytes(os.urandom(LIMIT))
    with pytest.raises(CodeTooLarge, match=f"at most {LIMIT} bytes"):
        upload(client, tmp_path / "big", lambda *_: None)
    assert code_dir(spec, read_spec(spec), None) is not None


def test_a_job_naming_an_unknown_bundle_is_a_422(client: StrataClient) -> None:
    document = make_spec("mirrored", code={"sha256": "0" * 64})
    with pytest.raises(ClientError) as refused:
        client.submit_document(document)
    assert refused.value.status_code == 422
    assert refused.value.errors[0]["field"] == "code.sha256"


@pytest.mark.slow  # the server in a subprocess
def test_strata_submit_uploads_the_code_dir_then_finds_it_known(
    server_url: str, tmp_path: Path
) -> None:
    spec = project(tmp_path / "cli")
    env = {
        **os.environ,
        "STRATA_SERVER": server_url,
        "STRATA_TOKEN": ADMIN_TOKEN,
        "COLUMNS": "1000",
    }

    def submit() -> subprocess.CompletedProcess[str]:
        return run_strata(["submit", str(spec)], env)

    first = submit()
    assert first.returncode == 0, first.stderr
    assert "uploaded" in first.stdout and "submitted" in first.stdout
    second = submit()
    assert second.returncode == 0, second.stderr
    assert "already on the server" in second.stdout
    (tmp_path / "cli" / "weights.bin").write_bytes(os.urandom(LIMIT))
    refused = submit()
    assert refused.returncode == 1
    assert str(LIMIT) in refused.stderr and "STRATA_MAX_CODE_BYTES" in refused.stderr
