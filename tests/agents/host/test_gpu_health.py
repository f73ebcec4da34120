"""The NVML probe against recorded NVML answers: what pynvml returned or raised on real
hosts (a lost GPU, ECC errors, retired pages, XIDs, throttling), replayed call by call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml
import pytest

from agents.host.gpu_health import GpuHealthProbe

LOST = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
NOT_SUPPORTED = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
TIMEOUT = pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
UNKNOWN = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)


@dataclass
class EventData:  # c_nvmlEventData_t's fields that the probe reads
    device: object
    eventType: int
    eventData: int


# A healthy GPU as an A100 answers: no ECC errors, no pages pending, idle clocks.
HEALTHY: dict[str, list[Any]] = {
    "nvmlDeviceGetTotalEccErrors": [0],
    "nvmlDeviceGetRetiredPagesPendingStatus": [pynvml.NVML_FEATURE_DISABLED],
    "nvmlDeviceGetCurrentClocksEventReasons": [pynvml.nvmlClocksEventReasonGpuIdle],
}


class RecordedNvml:
    """pynvml's constants and error class, with each function answering from a recording:
    per GPU index a list of answers (a value, or an exception to raise), the last one kept."""

    NVMLError = pynvml.NVMLError

    def __init__(
        self, per_gpu: dict[int, dict[str, list[Any]]], events: list[Any] | None = None
    ) -> None:
        self.per_gpu = per_gpu
        self.events = list(events or [])
        self.calls: list[str] = []
        self.registered: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)  # the constants

    def _answer(self, index: int, name: str) -> Any:
        self.calls.append(name)
        recorded = {**HEALTHY, **self.per_gpu[index]}.get(name)
        if recorded is None:
            raise NOT_SUPPORTED
        answer = recorded.pop(0) if len(recorded) > 1 else recorded[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if "nvmlDeviceGetHandleByIndex" in self.per_gpu[index]:
            self._answer(index, "nvmlDeviceGetHandleByIndex")
        return ("handle", index)

    def nvmlDeviceGetIndex(self, handle: tuple[str, int]) -> int:
        return handle[1]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> Any:
        assert (kind, counter) == (
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        return self._answer(handle[1], "nvmlDeviceGetTotalEccErrors")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> Any:
        return self._answer(handle[1], "nvmlDeviceGetRetiredPagesPendingStatus")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> Any:
        return self._answer(handle[1], "nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlEventSetCreate(self) -> str:
        return "event set"

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, events: str) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError
        answer = self.per_gpu[handle[1]].get("nvmlDeviceRegisterEvents")
        if answer:
            raise answer[0]
        self.registered.append(handle[1])

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> EventData:
        assert timeout_ms == 0, "the probe never waits for an event"
        if not self.events:
            raise TIMEOUT
        event = self.events.pop(0)
        if isinstance(event, BaseException):
            raise event
        assert isinstance(event, EventData)
        return event

    def nvmlEventSetFree(self, events: str) -> None:
        pass


def test_healthy_gpus_report_nothing() -> None:
    found = GpuHealthProbe(RecordedNvml({0: {}, 1: {}}), [0, 1]).probe()
    assert (found.faults, found.warnings, found.unknown) == ([], [], [])


def test_a_gpu_lost_from_the_bus_is_a_fault() -> None:
    # A lost GPU answers its handle, then NVML_ERROR_GPU_IS_LOST to every query.
    nvml = RecordedNvml({0: {}, 1: {"nvmlDeviceGetTotalEccErrors": [LOST]}})
    found = GpuHealthProbe(nvml, [0, 1]).probe()
    assert [(f.kind, f.device, f.detail) for f in found.faults] == [
        ("gpu_lost", 1, "lost from the bus")
    ]
    assert found.unknown == []


def test_a_gpu_whose_handle_is_lost_is_a_fault() -> None:
    nvml = RecordedNvml({0: {"nvmlDeviceGetHandleByIndex": [LOST]}})
    [fault] = GpuHealthProbe(nvml, [0]).probe().faults
    assert (fault.kind, fault.device) == ("gpu_lost", 0)


def test_uncorrectable_ecc_errors_are_a_fault_with_their_count() -> None:
    nvml = RecordedNvml({0: {"nvmlDeviceGetTotalEccErrors": [3]}})
    [fault] = GpuHealthProbe(nvml, [0]).probe().faults
    assert (fault.kind, fault.device, fault.count) == ("ecc_uncorrected", 0, 3)
    assert fault.detail == "uncorrectable ECC errors (3)"


def test_retired_pages_pending_are_a_fault() -> None:
    nvml = RecordedNvml(
        {0: {"nvmlDeviceGetRetiredPagesPendingStatus": [pynvml.NVML_FEATURE_ENABLED]}}
    )
    [fault] = GpuHealthProbe(nvml, [0]).probe().faults
    assert (fault.kind, fault.device) == ("retired_pages_pending", 0)


def test_a_hardware_xid_is_a_fault_and_a_tasks_xid_a_warning() -> None:
    nvml = RecordedNvml(
        {0: {}, 1: {}},
        events=[
            EventData(("handle", 1), pynvml.nvmlEventTypeXidCriticalError, 79),
            EventData(("handle", 0), pynvml.nvmlEventTypeXidCriticalError, 13),
        ],
    )
    probe = GpuHealthProbe(nvml, [0, 1])
    found = probe.probe()
    assert nvml.registered == [0, 1]
    assert [(f.kind, f.device, f.count) for f in found.faults] == [("xid", 1, 79)]
    assert [(f.kind, f.device, f.count) for f in found.warnings] == [("xid", 0, 13)]
    # Events are read once: the next round has none left, and registers nothing again.
    again = probe.probe()
    assert (again.faults, again.warnings, nvml.registered) == ([], [], [0, 1])


def test_a_gpu_without_xid_events_is_skipped() -> None:
    nvml = RecordedNvml({0: {"nvmlDeviceRegisterEvents": [NOT_SUPPORTED]}})
    found = GpuHealthProbe(nvml, [0]).probe()
    assert (found.faults, found.unknown) == ([], [])


def test_throttling_is_a_warning_not_a_fault() -> None:
    reasons = pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonSwPowerCap
    nvml = RecordedNvml({0: {"nvmlDeviceGetCurrentClocksEventReasons": [reasons]}})
    found = GpuHealthProbe(nvml, [0]).probe()
    assert found.faults == []
    [warning] = found.warnings
    assert (warning.kind, warning.detail) == ("throttled", "throttled: hardware thermal slowdown")


def test_queries_a_gpu_does_not_support_are_skipped() -> None:
    # A consumer GPU: no ECC, no page retirement, no clock reasons.
    nvml = RecordedNvml(
        {
            0: {
                "nvmlDeviceGetTotalEccErrors": [NOT_SUPPORTED],
                "nvmlDeviceGetRetiredPagesPendingStatus": [NOT_SUPPORTED],
                "nvmlDeviceGetCurrentClocksEventReasons": [NOT_SUPPORTED],
            }
        }
    )
    found = GpuHealthProbe(nvml, [0]).probe()
    assert (found.faults, found.warnings, found.unknown) == ([], [], [])


def test_a_failing_query_is_unknown_not_a_fault() -> None:
    nvml = RecordedNvml({0: {"nvmlDeviceGetTotalEccErrors": [UNKNOWN, 0]}})
    probe = GpuHealthProbe(nvml, [0])
    first = probe.probe()
    assert first.faults == []
    assert len(first.unknown) == 1 and first.unknown[0].startswith("gpu 0:")
    assert probe.probe().unknown == []  # it answered the next time


@pytest.mark.parametrize("error", [LOST, UNKNOWN])
def test_failing_xid_reads_are_unknown(error: pynvml.NVMLError) -> None:
    nvml = RecordedNvml({0: {}}, events=[error])
    found = GpuHealthProbe(nvml, [0]).probe()
    assert found.faults == [] and found.unknown[0].startswith("xid events:")
