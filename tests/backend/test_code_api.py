"""PUT, HEAD and GET /code/{sha256}: bundles stored whole under their SHA-256, or not at all.

Bundles are files under the data dir and no table, so one database is enough here.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import ClientDisconnect

from backend.app import create_app
from backend.code.store import BadBundle, CodeStore
from backend.errors import PayloadTooLarge
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN, make_settings

LIMIT = 4096
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


async def test_a_bundle_is_stored_once_and_agents_fetch_it(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    body = b"a tar, as far as the server cares" * 10
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
    assert sorted(p.name for p in (tmp_path / "data" / "code").iterdir()) == [f"{sha}.tar"]


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
    at = b"z" * LIMIT
    assert (await http.put(f"/code/{digest(at)}", content=at, headers=ADMIN)).status_code == 201


async def chunks(*parts: bytes, then_disconnect: bool = False) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
    if then_disconnect:
        raise ClientDisconnect


async def test_a_truncated_upload_leaves_nothing(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "code", LIMIT)
    body = b"0123456789"
    with pytest.raises(BadBundle, match="truncated: the client went away after 5 bytes"):
        await store.receive(digest(body), chunks(body[:5], then_disconnect=True), None)
    with pytest.raises(BadBundle, match="truncated: 5 of 10 bytes received"):
        await store.receive(digest(body), chunks(body[:5]), len(body))
    with pytest.raises(PayloadTooLarge, match=str(LIMIT)):
        await store.receive(digest(body), chunks(body), LIMIT + 1)
    assert list((tmp_path / "code").iterdir()) == []
    assert store.uploads == 0
    stored = await store.receive(digest(body), chunks(body[:5], body[5:]), len(body))
    assert stored.created and store.uploads == 1
    assert (tmp_path / "code" / f"{digest(body)}.tar").read_bytes() == body
