"""Code bundles end to end: `strata submit` from a dir outside every agent's workspace runs a
job whose script exists only there; the same code again uploads nothing; an unsafe bundle
fails its task with the reason; a code dir over the limit is refused before any upload."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import REPO, Cluster, local_cluster
from tests.support.processes import STRATA

pytestmark = pytest.mark.e2e

LIMIT = 1 << 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRATA_MAX_CODE_BYTES", str(LIMIT))
        with local_cluster(tmp_path_factory.mktemp("bundles") / "data") as running:
            yield running


def job_spec(name: str, **overrides: Any) -> dict[str, Any]:
    return {
        "name": name,
        "strategy": "mirrored",
        "entrypoint": ["python", "train.py"],
        "replicas": {"chief": {"count": 1, "gpus": 0}},
        "restart": {"policy": "never"},
        **overrides,
    }


def strata_submit(cluster: Cluster, spec: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "STRATA_SERVER": cluster.url,
        "STRATA_TOKEN": cluster.admin_token,
        "COLUMNS": "1000",  # rich wraps long messages at 80 columns otherwise
    }
    return subprocess.run(
        [*STRATA, "submit", str(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=spec.parent,
    )


def submitted_id(result: subprocess.CompletedProcess[str]) -> int:
    found = re.search(r"job (\d+) ", result.stdout)
    assert found, result.stdout + result.stderr
    return int(found[1])


def bundles_on_server(cluster: Cluster) -> list[str]:
    code = cluster.data_dir / "code"
    return sorted(p.name for p in code.iterdir()) if code.is_dir() else []


def project(root: Path, marker: str) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "message.py").write_text(f"TEXT = {marker!r}\n")
    (root / "train.py").write_text(
        "import sys\nsys.path.insert(0, 'lib')\nfrom message import TEXT\nprint(TEXT)\n"
    )
    (root / ".strataignore").write_text("outputs/\n")
    (root / "outputs").mkdir()
    (root / "outputs" / "big.bin").write_bytes(os.urandom(2 * LIMIT))  # ignored
    spec = root / "job.yaml"
    spec.write_text(yaml.safe_dump(job_spec("bundled", code={})))
    return spec


def test_a_job_runs_code_that_exists_only_where_it_was_submitted(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert not tmp_path.resolve().is_relative_to(REPO)  # outside every agent's workspace
    spec = project(tmp_path / "proj", "hello from a bundle")
    first = strata_submit(cluster, spec)
    assert first.returncode == 0, first.stderr
    assert "uploaded" in first.stdout
    job = cluster.wait_status(submitted_id(first), "succeeded", timeout=120)
    assert job["spec"]["code"]["sha256"]
    assert "hello from a bundle" in cluster.logs(job["id"], "chief:0")
    env = {**os.environ, "STRATA_SERVER": cluster.url, "STRATA_TOKEN": cluster.admin_token}
    shown = subprocess.run(
        [*STRATA, "jobs", "show", str(job["id"])], env=env, capture_output=True, text=True
    )
    assert f"code: bundle {job['spec']['code']['sha256']}" in shown.stdout, shown.stderr
    stored = bundles_on_server(cluster)

    again = strata_submit(cluster, spec)
    assert again.returncode == 0, again.stderr
    assert "already on the server" in again.stdout
    assert bundles_on_server(cluster) == stored  # nothing uploaded
    cluster.wait_status(submitted_id(again), "succeeded", timeout=120)


def test_a_parameter_server_job_runs_its_chief_from_the_bundle(
    cluster: Cluster, tmp_path: Path
) -> None:
    root = tmp_path / "ps"
    root.mkdir()
    # The script exists only here (a copy under another name, outside the workspace).
    (root / "my_digits.py").write_text((REPO / "examples" / "digits.py").read_text())
    spec = root / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "bundled-ps",
                "strategy": "parameter_server",
                "entrypoint": [
                    *("python", "my_digits.py", "--epochs", "2", "--steps-per-execution", "4"),
                    *("--validation-steps", "5", "--evaluate-steps", "5"),
                ],
                "replicas": {
                    "chief": {"count": 1},
                    "worker": {"count": 2},
                    "ps": {"count": 1},
                },
                "restart": {"policy": "never"},
                "code": {},
            }
        )
    )
    env = {
        **os.environ,
        "STRATA_SERVER": cluster.url,
        "STRATA_TOKEN": cluster.admin_token,
        "COLUMNS": "1000",
    }
    result = subprocess.run(
        [*STRATA, "submit", str(spec), "--follow"],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=root,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job = cluster.job(submitted_id(result))
    assert job["status"] == "succeeded"
    assert len({task["host"] for task in job["tasks"]}) == 2  # across both agents


def crafted(*members: tarfile.TarInfo) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        train = tarfile.TarInfo("train.py")
        body = b"print('must not run')\n"
        train.size = len(body)
        archive.addfile(train, io.BytesIO(body))
        for member in members:
            archive.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return out.getvalue()


def escaping_file() -> tarfile.TarInfo:
    member = tarfile.TarInfo("../x")
    member.size = 1
    return member


def absolute_link() -> tarfile.TarInfo:
    member = tarfile.TarInfo("etc")
    member.type = tarfile.SYMTYPE
    member.linkname = "/etc"
    return member


@pytest.mark.parametrize(
    ("member", "reason"),
    [(escaping_file, "has a '..' part"), (absolute_link, "a link to the absolute path '/etc'")],
)
def test_an_unsafe_bundle_fails_its_task_with_the_reason(
    cluster: Cluster, member: Any, reason: str
) -> None:
    body = crafted(member())
    sha = hashlib.sha256(body).hexdigest()
    put = cluster.http.put(f"/code/{sha}", content=body)
    assert put.status_code == 201, put.text
    job = cluster.submit(job_spec(f"unsafe-{sha[:8]}", code={"sha256": sha}))
    failed = cluster.wait_status(job["id"], "failed", timeout=60)
    said = json.dumps(failed) + json.dumps(cluster.events(job["id"]))
    assert reason in said, said
    logs = cluster.http.get(f"/jobs/{job['id']}/tasks/chief:0/logs")
    assert logs.status_code == 404 or "must not run" not in logs.text


def test_a_code_dir_over_the_limit_is_refused_before_any_upload(
    cluster: Cluster, tmp_path: Path
) -> None:
    spec = project(tmp_path / "big", "never runs")
    (tmp_path / "big" / ".strataignore").write_text("")  # outputs/big.bin now counts
    before = bundles_on_server(cluster)
    refused = strata_submit(cluster, spec)
    assert refused.returncode == 1
    assert f"at most {LIMIT} bytes" in refused.stderr
    assert "STRATA_MAX_CODE_BYTES" in refused.stderr
    assert bundles_on_server(cluster) == before
