"""Byte counts for people to read."""

from __future__ import annotations


def human_size(size: int | None) -> str:
    """1536 → "1.5 KB"; None → "-"."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
