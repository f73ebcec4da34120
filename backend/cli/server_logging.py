"""The server process's logging: uvicorn's own configuration, plus the control plane's loggers.

Uvicorn configures only its loggers (``uvicorn``, ``uvicorn.error``, ``uvicorn.access``), so
without this the server's own messages (an agent joined, a host lost, a refused token) would
reach the terminal only at WARNING and above, through Python's last-resort handler, with no
time or level. They go to uvicorn's stderr handler instead, at the server's log level, with a
timestamp: an operator reads when a host went silent.
"""

from __future__ import annotations

import copy
from typing import Any

from uvicorn.config import LOGGING_CONFIG


def server_log_config(level: str) -> dict[str, Any]:
    """Uvicorn's logging config (for `uvicorn.Config(log_config=...)`) with the server's
    loggers at `level` (debug, info, warning...)."""
    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
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
