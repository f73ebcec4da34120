"""Security events: requests refused because a client spoke for what is not its own (an agent
for another host's tasks, a runtime for a task its job does not have). One logger,
`strata.security`, so that operators can route these lines somewhere they are watched."""

from __future__ import annotations

import logging

log = logging.getLogger("strata.security")


def refused(peer: str, what: str) -> None:
    """Log a refusal: who (never a token), and what they claimed."""
    log.warning("security: refused %s: %s", peer, what)
