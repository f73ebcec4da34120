"""`strata jobs show` and a job's code bundle: its digest, size and first files, "and K more"."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.cli.bundle_view import bundle_lines, describe_bundle
from backend.cli.code_submit import upload, with_bundle
from backend.code.schemas import BundleMember, CodeManifest
from backend.rest_client import ClientError, StrataClient
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.cli import run_strata
from tests.support.factories import make_spec
from tests.support.processes import strata_server

SHA = "ab" * 32


def manifest(listed: list[BundleMember], members: int) -> CodeManifest:
    return CodeManifest(
        sha256=SHA,
        size=10240,
        members=members,
        files=sum(m.kind == "file" for m in listed),
        unpacked_size=sum(m.size for m in listed),
        listed=listed,
        more=members - len(listed),
    )


def test_each_kind_of_member_reads_as_ls_would_suggest() -> None:
    lines = bundle_lines(
        manifest(
            [
                BundleMember(path="README", size=1536, kind="file"),
                BundleMember(path="latest", size=0, kind="symlink", target="src/train.py"),
                BundleMember(path="src", size=0, kind="dir"),
                BundleMember(path="twin", size=0, kind="hardlink", target="README"),
            ],
            members=4,
        )
    )
    assert lines == [
        f"code: bundle {SHA}, 10.0 KB (1 file, 1.5 KB unpacked)",
        "  README  1.5 KB",
        "  latest -> src/train.py",
        "  src/",
        "  twin (hard link to README)",
    ]


def test_only_the_first_members_are_listed_and_the_rest_counted() -> None:
    listed = [BundleMember(path=f"f{i}.py", size=1, kind="file") for i in range(5)]
    lines = bundle_lines(manifest(listed, members=12), shown=2)
    assert lines[1:] == ["  f0.py  1 B", "  f1.py  1 B", "  … and 10 more"]
    assert bundle_lines(manifest(listed, members=5), shown=0)[1:] == ["  … and 5 more"]


class Refusing:
    def code_manifest(self, sha256: str) -> CodeManifest:
        raise ClientError(404, f"no code bundle {sha256} on this server: upload it first", [])


def test_a_bundle_the_server_cannot_describe_still_shows_its_digest() -> None:
    lines = describe_bundle(Refusing(), SHA)  # type: ignore[arg-type]
    assert lines == [f"code: bundle {SHA} (no code bundle {SHA} on this server: upload it first)"]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}
    with strata_server(tmp_path_factory.mktemp("show") / "data", env) as url:
        yield url


@pytest.mark.slow  # the server in a subprocess
def test_jobs_show_names_the_bundle_with_its_size_and_files(
    server_url: str, tmp_path: Path
) -> None:
    code = tmp_path / "code"
    (code / "lib").mkdir(parents=True)
    (code / "train.py").write_text("print('train')\n")
    for name in ("a", "b", "c"):
        (code / "lib" / f"{name}.py").write_text(f"{name} = 1\n")
    with StrataClient(server_url, ADMIN_TOKEN) as client:
        sha = upload(client, code, lambda *_: None)
        job = client.submit_document(with_bundle(make_spec("mirrored"), sha))
    env = {**os.environ, "STRATA_SERVER": server_url, "STRATA_TOKEN": ADMIN_TOKEN}
    shown = run_strata(["jobs", "show", str(job.id), "--files", "3"], env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("code: bundle"))
    assert lines[at].startswith(f"code: bundle {sha}, 10.0 KB (4 files, 33 B unpacked)")
    assert lines[at + 1 : at + 5] == [
        "  lib/",
        "  lib/a.py  6 B",
        "  lib/b.py  6 B",
        "  … and 2 more",
    ]


@pytest.mark.slow  # the server in a subprocess
def test_jobs_show_names_the_jobs_environment(server_url: str) -> None:
    env = {**os.environ, "STRATA_SERVER": server_url, "STRATA_TOKEN": ADMIN_TOKEN}
    with StrataClient(server_url, ADMIN_TOKEN) as client:
        in_image = client.submit_document(
            {**make_spec("mirrored"), "environment": {"image": "tf:2"}}
        )
        own = client.submit_document(make_spec("mirrored"))
    for job, expected in ((in_image, ["environment: image tf:2"]), (own, [])):
        shown = run_strata(["jobs", "show", str(job.id)], env)
        assert shown.returncode == 0, shown.stderr
        assert [line for line in shown.stdout.splitlines() if "environment" in line] == expected
