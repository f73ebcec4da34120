"""HTTP headers that belong to one connection (RFC 9110 §7.6.1): a proxy never passes them on,
in either direction (the TensorBoard proxy, a follower forwarding to the leader)."""

from __future__ import annotations

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
