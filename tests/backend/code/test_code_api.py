"""PUT, HEAD and GET /code/{sha256}: bundles stored whole under their SHA-256, or not at all;
GET /code/{sha256}/manifest: what one holds, read when it was stored.

Bundles and their manifests are files under the data dir and no table, so one database is
enough here.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import ClientDisconnect

from backend.app import create_app
from backend.code.archive import pack
from backend.code.manifest import read_manifest
from backend.code.store import BadBundle, CodeStore
from backend.errors import PayloadTooLarge
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings

LIMIT = 2 * tarfile.RECORDSIZE  # a small bundle, padded as tarfile pads, fills it exactly
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}"}


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(
        f"sqlite:///{tmp_path / 'strata.db'}", tmp_path / "data", max_code_bytes=LIMIT
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://strata.test") as client:
            yield client


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def tar_of(files: dict[str, bytes]) -> bytes:
    """A tar holding `files` (path: content), padded to whole records as tarfile pads."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, content in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(content)
            archive.addfile(member, io.BytesIO(content))
    return out.getvalue()


async def test_a_bundle_is_stored_once_and_agents_fetch_it(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    body = tar_of({"train.py": b"print('hello')\n"})
    sha = digest(body)
    unknown = await http.head(f"/code/{sha}", headers=ADMIN)
    assert unknown.status_code == 404
    assert unknown.headers["Strata-Max-Code-Bytes"] == str(LIMIT)
    assert (await http.get(f"/code/{sha}", headers=AGENT)).status_code == 404

    first = await http.put(f"/code/{sha}", content=body, headers=ADMIN)
    assert first.status_code == 201, first.text
    assert first.json() == {"sha256": sha, "size": len(body)}
    again = await http.put(f"/code/{sha}", content=body, headers=ADMIN)
    assert again.status_code == 200
    assert again.json() == {"sha256": sha, "size": len(body)}

    known = await http.head(f"/code/{sha}", headers=AGENT)
    assert known.status_code == 200
    assert known.headers["content-length"] == str(len(body))
    fetched = await http.get(f"/code/{sha}", headers=AGENT)
    assert fetched.status_code == 200
    assert fetched.content == body
    assert sorted(p.name for p in (tmp_path / "data" / "code").iterdir()) == [
        f"{sha}.manifest.json",
        f"{sha}.tar",
    ]


async def test_only_an_admin_uploads_and_a_token_is_needed_to_fetch(
    http: httpx.AsyncClient,
) -> None:
    body = b"x"
    put = await http.put(f"/code/{digest(body)}", content=body, headers=AGENT)
    assert put.status_code == 403
    assert (await http.get(f"/code/{digest(body)}")).status_code == 401


@pytest.mark.parametrize("bad", ["abc", "A" * 64, "g" * 64, "0" * 65])
async def test_a_digest_that_is_not_a_sha256_is_a_400_naming_it(
    http: httpx.AsyncClient, bad: str
) -> None:
    answer = await http.put(f"/code/{bad}", content=b"x", headers=ADMIN)
    assert answer.status_code == 400
    assert "64 lowercase hex characters" in answer.json()["detail"]
    assert (await http.get(f"/code/{bad}", headers=AGENT)).status_code == 400


async def test_a_body_that_does_not_match_its_digest_is_refused_and_not_kept(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    claimed = digest(b"what was meant")
    answer = await http.put(f"/code/{claimed}", content=b"what was sent", headers=ADMIN)
    assert answer.status_code == 400
    assert "does not match its digest" in answer.json()["detail"]
    assert digest(b"what was sent") in answer.json()["detail"]
    assert list((tmp_path / "data" / "code").iterdir()) == []
    assert (await http.head(f"/code/{claimed}", headers=ADMIN)).status_code == 404


async def test_a_bundle_over_the_code_limit_is_a_413_and_the_limit_is_its_own(
    http: httpx.AsyncClient,
) -> None:
    over = b"y" * (LIMIT + 1)
    answer = await http.put(f"/code/{digest(over)}", content=over, headers=ADMIN)
    assert answer.status_code == 413
    assert str(LIMIT) in answer.json()["detail"]
    # The code route's limit is not max_request_bytes (1 MiB), in either direction.
    at = tar_of({"data.bin": b"z" * tarfile.RECORDSIZE})
    assert len(at) == LIMIT
    assert (await http.put(f"/code/{digest(at)}", content=at, headers=ADMIN)).status_code == 201


async def chunks(*parts: bytes, then_disconnect: bool = False) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
    if then_disconnect:
        raise ClientDisconnect


async def test_a_truncated_upload_leaves_nothing(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "code", LIMIT)
    body = tar_of({"a.py": b"0123456789"})
    with pytest.raises(BadBundle, match="truncated: the client went away after 5 bytes"):
        await store.receive(digest(body), chunks(body[:5], then_disconnect=True), None)
    with pytest.raises(BadBundle, match=f"truncated: 5 of {len(body)} bytes received"):
        await store.receive(digest(body), chunks(body[:5]), len(body))
    with pytest.raises(PayloadTooLarge, match=str(LIMIT)):
        await store.receive(digest(body), chunks(body), LIMIT + 1)
    assert list((tmp_path / "code").iterdir()) == []
    assert store.uploads == 0
    stored = await store.receive(digest(body), chunks(body[:5], body[5:]), len(body))
    assert stored.created and store.uploads == 1
    assert (tmp_path / "code" / f"{digest(body)}.tar").read_bytes() == body
    assert (await store.manifest(digest(body))).files == 1


def manifest_of(answer: httpx.Response) -> dict[str, object]:
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


async def test_the_manifest_names_every_member_with_its_size_and_kind(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text("print('train')\n")
    (project / "README").write_text("read me\n")
    (project / "latest").symlink_to("src/train.py")
    bundle = pack(project)
    body = bundle.file.read()
    bundle.close()
    put = await http.put(f"/code/{bundle.sha256}", content=body, headers=ADMIN)
    assert put.status_code == 201, put.text

    manifest = manifest_of(await http.get(f"/code/{bundle.sha256}/manifest", headers=ADMIN))
    assert manifest == {
        "sha256": bundle.sha256,
        "size": len(body),
        "members": 4,
        "files": 2,
        "unpacked_size": len("print('train')\n") + len("read me\n"),
        "listed": [
            {"path": "README", "size": 8, "kind": "file", "target": None},
            {"path": "latest", "size": 0, "kind": "symlink", "target": "src/train.py"},
            {"path": "src", "size": 0, "kind": "dir", "target": None},
            {"path": "src/train.py", "size": 15, "kind": "file", "target": None},
        ],
        "more": 0,
    }
    # Read when stored and kept beside the bundle; read again from the bundle when missing.
    kept = tmp_path / "data" / "code" / f"{bundle.sha256}.manifest.json"
    assert kept.is_file()
    kept.unlink()
    again = manifest_of(await http.get(f"/code/{bundle.sha256}/manifest", headers=ADMIN))
    assert again == manifest and kept.is_file()


async def test_the_manifest_of_an_unknown_or_malformed_digest_says_so(
    http: httpx.AsyncClient,
) -> None:
    unknown = await http.get(f"/code/{'a' * 64}/manifest", headers=ADMIN)
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == f"no code bundle {'a' * 64} on this server: upload it first"
    malformed = await http.get("/code/not-a-digest/manifest", headers=ADMIN)
    assert malformed.status_code == 400  # as for the bundle itself
    assert "64 lowercase hex characters" in malformed.json()["detail"]
    # Agents fetch the bytes; the manifest is for people (admin and viewer tokens).
    assert (await http.get(f"/code/{'a' * 64}/manifest", headers=AGENT)).status_code == 403


async def test_a_body_that_is_not_a_tar_is_refused_and_not_kept(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    body = b"not a tar, whatever its name says"
    answer = await http.put(f"/code/{digest(body)}", content=body, headers=ADMIN)
    assert answer.status_code == 400
    assert "cannot be unpacked by agents" in answer.json()["detail"]
    assert "expected a tar archive" in answer.json()["detail"]
    assert list((tmp_path / "data" / "code").iterdir()) == []


def test_a_long_member_list_is_capped_and_the_rest_counted(tmp_path: Path) -> None:
    tar = tmp_path / "many.tar"
    tar.write_bytes(tar_of({f"f{i:02}.py": b"x" * i for i in range(12)}))
    manifest = read_manifest(digest(tar.read_bytes()), tar, max_listed=5)
    assert [member.path for member in manifest.listed] == [f"f{i:02}.py" for i in range(5)]
    assert (manifest.members, manifest.files, manifest.more) == (12, 12, 7)
    assert manifest.unpacked_size == sum(range(12))
    assert manifest.size == tar.stat().st_size
