"""A body over STRATA_MAX_REQUEST_BYTES gets its 413, with the message, on a real server over
loopback, however it is framed, whether or not the connection is to close afterwards and
whichever route it is sent to (a body at the limit reaches the route); and the bounds on
reading the rest of a refused body.

The client sends the whole body before it reads: had the server closed the socket with the
rest unread, the kernel would have reset the connection, failing the send and dropping the
answer (urllib, which asks for `Connection: close`, saw only a reset).
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from starlette.requests import ClientDisconnect

from backend.api import body as body_module
from backend.api.body import DRAIN_BYTES, discard
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.processes import strata_server

LIMIT = 1 << 20
BODY = 9 << 20  # 8 MiB over the limit
CHUNK = 64 << 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    env = {
        "STRATA_API_TOKEN": ADMIN_TOKEN,
        "STRATA_AGENT_TOKEN": AGENT_TOKEN,
        "STRATA_MAX_REQUEST_BYTES": str(LIMIT),
    }
    with strata_server(tmp_path_factory.mktemp("body") / "data", env) as url:
        address = urlsplit(url)
        assert address.hostname is not None and address.port is not None
        yield address.hostname, address.port


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def detail(self) -> str:
        detail: str = json.loads(self.body)["detail"]
        return detail


def read_answer(sock: socket.socket) -> Answer:
    """One HTTP/1.1 response with a Content-Length body (what the server sends)."""
    data = b""
    while b"\r\n\r\n" not in data:
        received = sock.recv(65536)
        assert received, f"the server closed the connection before answering: {data!r}"
        data += received
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        received = sock.recv(65536)
        assert received, "the server closed the connection in the middle of its answer"
        body += received
    return Answer(int(status_line.split()[1]), headers, body)


def request_head(version: str, *headers: str, path: str = "/jobs") -> bytes:
    lines = [
        f"POST {path} HTTP/{version}",
        "Host: strata.test",
        f"Authorization: Bearer {ADMIN_TOKEN}",
        "Content-Type: application/json",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def send_oversized(sock: socket.socket, chunked: bool) -> None:
    """The whole body, as fast as the server takes it; a reset here is the failure."""
    piece = b"x" * CHUNK
    for _ in range(BODY // CHUNK):
        sock.sendall(b"%x\r\n%s\r\n" % (CHUNK, piece) if chunked else piece)
    if chunked:
        sock.sendall(b"0\r\n\r\n")


FRAMINGS = {
    "content-length": (f"Content-Length: {BODY}",),
    "chunked": ("Transfer-Encoding: chunked",),
}
# A declared length is refused as declared; a chunked body once it has passed the limit.
REFUSALS = {
    "content-length": f"request body is {BODY} bytes; the limit is {LIMIT}",
    "chunked": f"request body is over the limit of {LIMIT} bytes",
}


@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "connection-close"])
@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_an_oversized_body_is_answered_413(
    server: tuple[str, int], framing: str, close: bool
) -> None:
    with socket.create_connection(server, timeout=30) as sock:
        sock.sendall(request_head("1.1", *FRAMINGS[framing], *(["Connection: close"] * close)))
        send_oversized(sock, chunked=framing == "chunked")
        answer = read_answer(sock)
        assert (answer.status, answer.detail()) == (413, REFUSALS[framing])
        if close:
            assert answer.headers.get("connection") == "close"
            assert sock.recv(1) == b""  # closed in order (FIN), not reset
        else:
            # The rest of the body was read: the connection carries the next request.
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: strata.test\r\n\r\n")
            assert read_answer(sock).status == 200


def test_http_1_0_gets_its_413(server: tuple[str, int]) -> None:
    """HTTP/1.0 closes after every answer, like Connection: close."""
    with socket.create_connection(server, timeout=30) as sock:
        sock.sendall(request_head("1.0", f"Content-Length: {BODY}"))
        send_oversized(sock, chunked=False)
        answer = read_answer(sock)
    assert (answer.status, answer.detail()) == (413, REFUSALS["content-length"])


def test_a_client_that_asks_first_is_refused_before_it_sends(server: tuple[str, int]) -> None:
    """With `Expect: 100-continue` the 413 comes at once, without asking for the body."""
    with socket.create_connection(server, timeout=30) as sock:
        sock.sendall(request_head("1.1", f"Content-Length: {BODY}", "Expect: 100-continue"))
        answer = read_answer(sock)
    assert (answer.status, answer.detail()) == (413, REFUSALS["content-length"])


def test_urllib_reads_the_413(server: tuple[str, int]) -> None:
    """The standard library's client sends `Connection: close` and the body before reading."""
    host, port = server
    request = urllib.request.Request(
        f"http://{host}:{port}/jobs",
        data=b"x" * BODY,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)  # noqa: S310 - an http URL built here
    assert refused.value.code == 413
    assert json.loads(refused.value.read())["detail"] == REFUSALS["content-length"]


def test_a_body_declared_past_the_drain_bound_is_refused_at_once(server: tuple[str, int]) -> None:
    """Nothing of it is read: the answer does not wait for a body the server would drop."""
    declared = DRAIN_BYTES + 1
    with socket.create_connection(server, timeout=10) as sock:
        sock.sendall(request_head("1.1", f"Content-Length: {declared}"))
        answer = read_answer(sock)
    assert answer.status == 413
    assert answer.detail() == f"request body is {declared} bytes; the limit is {LIMIT}"


# Routes whose JSON body FastAPI parses into a model: the same limit holds for them.
MODEL_ROUTES = ["/tokens", "/jobs/1/evaluator"]


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize("path", MODEL_ROUTES)
def test_every_route_answers_an_oversized_body_413(
    server: tuple[str, int], path: str, framing: str
) -> None:
    with socket.create_connection(server, timeout=30) as sock:
        sock.sendall(request_head("1.1", *FRAMINGS[framing], path=path))
        send_oversized(sock, chunked=framing == "chunked")
        answer = read_answer(sock)
        assert answer.status == 413
        assert json.loads(answer.body) == {"detail": REFUSALS[framing]}
        # The rest of the body was read: the connection carries the next request.
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: strata.test\r\n\r\n")
        assert read_answer(sock).status == 200


def send_body(sock: socket.socket, body: bytes, chunked: bool) -> None:
    if not chunked:
        sock.sendall(body)
        return
    for start in range(0, len(body), CHUNK):
        piece = body[start : start + CHUNK]
        sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    sock.sendall(b"0\r\n\r\n")


def padded(document: dict[str, str], size: int) -> bytes:
    """`document` as JSON followed by spaces, `size` bytes in all: still a valid body."""
    text = json.dumps(document).encode()
    return text + b" " * (size - len(text))


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize(
    ("path", "document", "status"),
    [
        ("/tokens", {"name": "at-the-limit"}, 201),
        ("/jobs/999/evaluator", {"action": "start"}, 404),  # the route's own answer: no such job
    ],
    ids=["tokens", "evaluator"],
)
def test_a_body_at_the_limit_reaches_the_route_and_one_byte_more_does_not(
    server: tuple[str, int], path: str, document: dict[str, str], status: int, framing: str
) -> None:
    chunked = framing == "chunked"
    for size, expected in ((LIMIT, status), (LIMIT + 1, 413)):
        body = padded(document, size)
        head = ("Transfer-Encoding: chunked",) if chunked else (f"Content-Length: {size}",)
        with socket.create_connection(server, timeout=30) as sock:
            sock.sendall(request_head("1.1", *head, path=path))
            send_body(sock, body, chunked)
            answer = read_answer(sock)
        assert answer.status == expected, (size, answer.body)
        if expected == 413:
            declared = f"request body is {size} bytes; the limit is {LIMIT}"
            assert answer.detail() == (REFUSALS[framing] if chunked else declared)


async def chunks_of(size: int, count: int, read: list[int]) -> AsyncIterator[bytes]:
    for _ in range(count):
        read.append(size)
        yield b"x" * size


async def test_discard_stops_at_its_budget() -> None:
    read: list[int] = []
    await discard(chunks_of(10, 100, read), budget=25)
    assert sum(read) == 30  # the chunk that crossed the budget is the last one read


async def test_discard_ends_quietly_when_the_client_goes_away() -> None:
    async def gone() -> AsyncIterator[bytes]:
        yield b"x"
        raise ClientDisconnect

    await discard(gone(), budget=DRAIN_BYTES)


async def test_discard_gives_up_on_a_client_that_stalls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_module, "DRAIN_SECONDS", 0.05)

    async def stalled() -> AsyncIterator[bytes]:
        yield b"x"
        await asyncio.sleep(3600)
        yield b"never"

    await asyncio.wait_for(discard(stalled(), budget=DRAIN_BYTES), timeout=5)
