"""Figures as the benchmark page writes them."""

from __future__ import annotations


def spread_text(values: dict[str, float], digits: int = 0, unit: str = "") -> str:
    """{"median", "min", "max"} → "median [min-max]", with thousands separators."""
    fmt = f"{{:,.{digits}f}}"
    median, low, high = (fmt.format(values[k]) for k in ("median", "min", "max"))
    return f"{median}{unit} [{low}-{high}]"
