"""One request to a board, streamed through: the request in, the answer back as it comes.

The board serves under the same path prefix as the proxy, so paths pass unchanged. What
authenticated the caller to Strata (the Authorization header, the cookie, a `token` query
parameter) never reaches TensorBoard, nor do hop-by-hop headers in either direction.
"""

from __future__ import annotations

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse

from backend.headers import HOP_BY_HOP
from backend.tensorboard.processes import Board, BoardFailed

NOT_FORWARDED = HOP_BY_HOP | {"host", "authorization", "cookie", "content-length"}
TOKEN_PARAMETER = "token"  # noqa: S105  (the name of a query parameter)


def upstream_url(board: Board, path: str, request: Request) -> httpx.URL:
    query = [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_PARAMETER]
    return httpx.URL(f"{board.base_url}{board.spec.prefix}/{path}", params=query)


async def forward(
    request: Request, board: Board, client: httpx.AsyncClient, path: str
) -> StreamingResponse:
    """`request`, sent to `board` at `path` (below its prefix), and its answer, streamed."""
    headers = [
        (name, value)
        for name, value in request.headers.items()
        if name.lower() not in NOT_FORWARDED
    ]
    outgoing = client.build_request(
        request.method,
        upstream_url(board, path, request),
        headers=headers,
        content=await request.body(),
    )
    try:
        answer = await client.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        raise BoardFailed(f"TensorBoard for {board.spec.key} did not answer: {exc!r}") from exc
    return StreamingResponse(
        answer.aiter_raw(),
        status_code=answer.status_code,
        headers={
            name: value for name, value in answer.headers.items() if name.lower() not in HOP_BY_HOP
        },
        background=BackgroundTask(answer.aclose),
    )
