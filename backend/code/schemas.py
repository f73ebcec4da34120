"""What the code routes answer, shared by the server and the client."""

from __future__ import annotations

from pydantic import BaseModel

# The header HEAD /code/{sha256} answers with, so that a client learns the limit before it
# uploads.
LIMIT_HEADER = "Strata-Max-Code-Bytes"


class CodeBundleRead(BaseModel):
    sha256: str
    size: int
