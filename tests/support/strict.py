"""Skips for missing system dependencies, which become failures under STRATA_TEST_STRICT=1."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

STRICT = os.environ.get("STRATA_TEST_STRICT") == "1"


def missing_dependency(reason: str) -> NoReturn:
    """Skip locally; fail in CI, where every system dependency must be present."""
    if STRICT:
        pytest.fail(f"STRATA_TEST_STRICT=1 and a dependency is missing: {reason}", pytrace=False)
    pytest.skip(reason)
