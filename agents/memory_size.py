"""Memory sizes as people write them ("4GiB", "512MiB", "2GB") and as bytes."""

from __future__ import annotations

import re

UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1000,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1000**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1000**3,
    "GIB": 1024**3,
    "T": 1024**4,
    "TB": 1000**4,
    "TIB": 1024**4,
}
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_memory(text: str) -> int:
    """Bytes in "4GiB", "1.5G" (binary, like "Gi"), "2GB" (decimal) or "1048576"."""
    match = SIZE.match(text)
    unit = match[2].upper() if match else ""
    unit = unit + "B" if unit.endswith("I") else unit  # "Gi" is "GiB"
    if match is None or unit not in UNITS:
        raise ValueError(
            f"{text!r} is not a memory size: write a number and a unit, like 4GiB, 512MiB or 2GB"
        )
    return int(float(match[1]) * UNITS[unit])


def format_memory(size: int) -> str:
    """The size in the largest binary unit it fills, e.g. "4 GiB", "1.5 GiB", "512 MiB"."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            value = size / factor
            return f"{value:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} B"
