"""The server process's logging: uvicorn's own configuration, plus the control plane's loggers.

Uvicorn configures only its loggers (``uvicorn``, ``uvicorn.error``, ``uvicorn.access``), so
without this the server's own messages (an agent joined, a host lost, a refused token) would
reach the terminal only at WARNING and above, through Python's last-resort handler, with no
time or level. They go to uvicorn's stderr handler instead, at the server's log level, with a
timestamp: an operator reads when a host went silent.

Without the access log (`STRATA_ACCESS_LOG`, off by default) the lines uvicorn and the
websockets library write for every websocket connection go too: the dashboard, every agent and
every training process open them, and the console is for what happens to agents and jobs.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from uvicorn.config import LOGGING_CONFIG

# uvicorn's line per websocket handshake ('... - "WebSocket /path" [accepted]' or a status),
# and the websockets library's, both on the "uvicorn.error" logger.
_HANDSHAKE_LINE = '%s - "WebSocket %s"'
_CONNECTION_LINES = frozenset({"connection open", "connection closed"})


class WebsocketConnectionLines(logging.Filter):
    """Drops the per-connection lines of websockets: the access log of websocket routes."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not (message.startswith(_HANDSHAKE_LINE) or message in _CONNECTION_LINES)


def server_log_config(level: str, *, access_log: bool = False) -> dict[str, Any]:
    """Uvicorn's logging config (for `uvicorn.Config(log_config=...)`) with the server's
    loggers at `level` (debug, info, warning...), and without websocket connection lines
    unless `access_log` (give uvicorn.Config the same `access_log` for HTTP requests)."""
    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
    if not access_log:
        config.setdefault("filters", {})["websocket_connections"] = {"()": WebsocketConnectionLines}
        config["loggers"]["uvicorn.error"]["filters"] = ["websocket_connections"]
    config["formatters"]["server"] = {
        "()": "uvicorn.logging.DefaultFormatter",
        "fmt": "%(asctime)s %(levelprefix)s %(name)s: %(message)s",
        "use_colors": None,
    }
    config["handlers"]["server"] = {
        "formatter": "server",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    # Every module's logger is a child of "backend" (backend.scheduling.controller, ...).
    config["loggers"]["backend"] = {
        "handlers": ["server"],
        "level": level.upper(),
        "propagate": False,
    }
    return config
