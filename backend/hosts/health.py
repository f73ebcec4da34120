"""A host's health as the server judges it: the faults its agent reports (and the clock's
offset, which only the server can measure), what a fault is called, and when faults cordon.

A cordoned host takes no new task; what runs there goes on (but for tasks on a GPU that was
lost). A fault cordons the host at once, and the cordon stays until an operator clears it,
even once the fault is gone: a GPU that threw an XID is suspect until someone looked. Clearing
it acknowledges the faults reported then: they cordon the host again only if they change (a
fault of another kind, GPU or path, or a count that grew), or once they have cleared and come
back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

from agents.protocol import HealthFault


class CordonCause(StrEnum):
    manual = "manual"  # an operator (POST /hosts/{name}/cordon)
    fault = "fault"  # a fault its agent (or the server, for the clock) found
    failures = "failures"  # its tasks' infrastructure failures


FaultKey = tuple[str, int | None, str | None]


def fault_key(fault: HealthFault) -> FaultKey:
    return (fault.kind, fault.device, fault.path)


def fault_words(fault: HealthFault) -> str:
    """e.g. "GPU 1: uncorrectable ECC errors (3)", "/data: 200 MiB free, below 1 GiB"."""
    if fault.device is not None:
        return f"GPU {fault.device}: {fault.detail}"
    if fault.path is not None:
        return f"{fault.path}: {fault.detail}"
    return fault.detail


def cordon_reason(faults: Sequence[HealthFault]) -> str:
    return "; ".join(fault_words(fault) for fault in faults)[:512]


def clock_fault(offset_seconds: float, limit_seconds: float) -> HealthFault | None:
    """A fault when the agent's clock is more than `limit_seconds` from the server's (0: never
    judged). Checkpoint times, leases and timeouts compare clocks across hosts."""
    if limit_seconds <= 0 or abs(offset_seconds) <= limit_seconds:
        return None
    way = "ahead of" if offset_seconds > 0 else "behind"
    return HealthFault(
        kind="clock_offset",
        detail=f"clock {abs(offset_seconds):.0f}s {way} the server's (at most {limit_seconds:g}s)",
    )


def new_faults(
    faults: Iterable[HealthFault], acknowledged: Iterable[HealthFault]
) -> list[HealthFault]:
    """The faults an operator has not cleared the cordon for: unseen at the clearing, or with
    a count that grew since."""
    seen = {fault_key(fault): fault.count for fault in acknowledged}
    fresh = []
    for fault in faults:
        key = fault_key(fault)
        if key not in seen:
            fresh.append(fault)
            continue
        before = seen[key]
        if fault.count is not None and (before is None or fault.count > before):
            fresh.append(fault)
    return fresh


def still_acknowledged(
    acknowledged: Iterable[HealthFault], faults: Iterable[HealthFault]
) -> list[HealthFault]:
    """The acknowledged faults still reported: one that cleared cordons again if it returns."""
    present = {fault_key(fault) for fault in faults}
    return [fault for fault in acknowledged if fault_key(fault) in present]


def stored(faults: Iterable[HealthFault]) -> list[dict[str, Any]]:
    return [fault.model_dump(exclude_none=True) for fault in faults]


def loaded(rows: Iterable[dict[str, Any]] | None) -> list[HealthFault]:
    return [HealthFault.model_validate(row) for row in rows or []]
