"""Bearer tokens: who is calling, and what kind of caller they are.

Tokens are compared in constant time against every known token (so timing reveals neither
which token matched nor how much of one did) and are never logged.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import StrEnum

from pydantic import SecretStr


class TokenKind(StrEnum):
    admin = "admin"  # users, the CLI and the dashboard
    agent = "agent"  # host agents joining the cluster


@dataclass(frozen=True)
class Principal:
    kind: TokenKind


class TokenRegistry:
    """The tokens this server accepts, by kind."""

    def __init__(self, tokens: dict[TokenKind, SecretStr | None]) -> None:
        self._tokens = [
            (kind, secret.get_secret_value().encode())
            for kind, secret in tokens.items()
            if secret is not None and secret.get_secret_value()
        ]

    def identify(self, token: str) -> Principal | None:
        presented = token.encode()
        found: Principal | None = None
        for kind, known in self._tokens:
            # No early exit: every comparison runs whatever matched before.
            if hmac.compare_digest(presented, known) and found is None:
                found = Principal(kind)
        return found
