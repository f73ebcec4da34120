"""Downsampling that keeps the shape of a curve: the min and max of each bucket.

Averaging would flatten exactly what a person looks for in a loss curve (spikes, a
divergence); keeping each bucket's extremes, in their original order, preserves them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def min_max_indices(values: Sequence[float | None], max_points: int) -> list[int]:
    """Indices of the points to keep: all of them when they fit, else each bucket's extremes."""
    n = len(values)
    if n <= max_points:
        return list(range(n))
    buckets = max(1, max_points // 2)
    keep: list[int] = []
    for b in range(buckets):
        start, end = b * n // buckets, (b + 1) * n // buckets
        finite = [i for i in range(start, end) if _finite(values[i])]
        if not finite:
            keep.append(start)  # a run of NaNs: show one, so the gap is visible
            continue
        low = min(finite, key=lambda i: values[i])  # type: ignore[arg-type, return-value]
        high = max(finite, key=lambda i: values[i])  # type: ignore[arg-type, return-value]
        keep.extend(sorted({low, high}))
    return keep


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
