"""TLS for clients of the server (agents, runtimes, the CLI): which CAs to trust.

A server with its own CA (a private one, or a self-signed certificate) is trusted through a CA
file: `--ca-file` on the agent and the CLI, STRATA_CA_FILE in the environment, which the agent
hands on to the tasks it starts so that their runtimes trust the same server.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

CA_FILE_ENV = "STRATA_CA_FILE"


def client_ssl(url: str, ca_file: str | None) -> ssl.SSLContext | None:
    """The context to verify a wss:// or https:// server with; None for plain ws:// and http://
    (the websocket clients refuse a context there). Without a CA file, the system's CAs."""
    if urlsplit(url).scheme.lower() not in ("wss", "https"):
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"CA file {ca_file}: {exc}") from None
