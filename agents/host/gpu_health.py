"""What NVML says is wrong with the host's GPUs, for the health report.

Faults take the host out of service: a GPU lost from the bus, uncorrectable ECC errors, retired
pages waiting for a reset, a hardware XID. Throttling is a warning: the GPU still computes
correctly, only slower, and it often passes (a hot aisle, a power cap). The NVML module is
handed in (``pynvml``, or a recording of its answers in tests); a query a GPU does not support
is skipped, and any other error makes that probe unknown, never a fault.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from agents.protocol import HealthFault

log = logging.getLogger(__name__)

# XIDs that name a hardware fault (NVIDIA's XID catalogue): double-bit ECC (48), internal
# micro-controller faults (61, 62), row remapping (63, 64), NVLink (74), fallen off the bus
# (79), uncontained ECC (94, 95), GSP (119, 120), unrecovered ECC (140). Others (13, 31, 43,
# 45: a kernel's own fault, a task killed) follow from what a task did: a warning.
HARDWARE_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})

# Clock event reasons that mean throttling, by bit (nvmlClocksEventReason*).
THROTTLE_REASONS = {
    0x8: "hardware slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown",
    0x20: "software thermal slowdown",
}


@dataclass
class GpuFindings:
    faults: list[HealthFault] = field(default_factory=list)
    warnings: list[HealthFault] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


class GpuHealthProbe:
    """Probes the GPUs at `indices` through `nvml`, opened by the caller. XID events are
    read from an event set registered once, without waiting (a timeout of 0)."""

    def __init__(self, nvml: ModuleType | Any, indices: Iterable[int]) -> None:
        self.nvml = nvml
        self.indices = list(indices)
        self._events: object | None = None
        self._handles: dict[int, object] = {}  # index -> handle, for the XIDs' devices
        self._xids_registered = False

    def probe(self) -> GpuFindings:
        found = GpuFindings()
        for index in self.indices:
            try:
                self._device(index, found)
            except self.nvml.NVMLError as exc:
                if self._lost(exc):
                    found.faults.append(_lost(index))
                else:
                    found.unknown.append(f"gpu {index}: {exc}")
        try:
            self._xids(found)
        except self.nvml.NVMLError as exc:
            # A GPU that fell off meanwhile is named by its own query, on the next probe.
            found.unknown.append(f"xid events: {exc}")
        return found

    def _lost(self, exc: Exception) -> bool:
        return bool(getattr(exc, "value", None) == self.nvml.NVML_ERROR_GPU_IS_LOST)

    def _supported(self, exc: Exception) -> bool:
        return bool(getattr(exc, "value", None) != self.nvml.NVML_ERROR_NOT_SUPPORTED)

    def _device(self, index: int, found: GpuFindings) -> None:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self._handles[index] = handle
        try:
            errors = int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
        except nvml.NVMLError as exc:
            if self._supported(exc):
                raise
        else:
            if errors > 0:
                found.faults.append(
                    HealthFault(
                        kind="ecc_uncorrected",
                        device=index,
                        detail=f"uncorrectable ECC errors ({errors})",
                        count=errors,
                    )
                )
        try:
            pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        except nvml.NVMLError as exc:
            if self._supported(exc):
                raise
        else:
            if pending == nvml.NVML_FEATURE_ENABLED:
                found.faults.append(
                    HealthFault(
                        kind="retired_pages_pending",
                        device=index,
                        detail="retired memory pages pending: the GPU needs a reset",
                    )
                )
        try:
            reasons = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except nvml.NVMLError as exc:
            if self._supported(exc):
                raise
        else:
            named = [words for bit, words in THROTTLE_REASONS.items() if reasons & bit]
            if named:
                found.warnings.append(
                    HealthFault(
                        kind="throttled", device=index, detail="throttled: " + ", ".join(named)
                    )
                )

    def _xids(self, found: GpuFindings) -> None:
        nvml = self.nvml
        if not self._xids_registered:
            self._xids_registered = True  # once: a GPU that cannot report them never will
            try:
                events = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as exc:
                if self._supported(exc):
                    raise
                return
            for index, handle in self._handles.items():
                try:
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, events
                    )
                except nvml.NVMLError as exc:
                    if self._supported(exc):
                        raise
                    log.info("GPU %d cannot report XID events", index)
            self._events = events
        if self._events is None:
            return
        for _ in range(256):  # what piled up since the last probe; a bound, not a loop forever
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                    return  # nothing more
                raise
            xid = int(event.eventData)
            fault = HealthFault(
                kind="xid",
                device=self._index_of(event.device),
                detail=f"XID {xid}" + ("" if xid in HARDWARE_XIDS else " (from a task's work)"),
                count=xid,
            )
            (found.faults if xid in HARDWARE_XIDS else found.warnings).append(fault)

    def _index_of(self, handle: object) -> int | None:
        with contextlib.suppress(self.nvml.NVMLError):
            index: int = int(self.nvml.nvmlDeviceGetIndex(handle))
            return index
        return next((i for i, known in self._handles.items() if known is handle), None)

    def close(self) -> None:
        if self._events is not None:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlEventSetFree(self._events)
            self._events = None


def _lost(index: int) -> HealthFault:
    return HealthFault(kind="gpu_lost", device=index, detail="lost from the bus")
