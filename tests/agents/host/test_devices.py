"""Which GPUs an agent offers: all of NVML's, or inside a scheduler's allocation only those
its own CUDA_VISIBLE_DEVICES names; simulated ones take the allocation's indices."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from agents.host.devices import nvml_devices, simulated_devices


@pytest.fixture
def four_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    patches = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 4,
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetName": lambda handle: b"H100",
        "nvmlDeviceGetUUID": lambda handle: f"GPU-{handle}aaa",
        "nvmlDeviceGetMemoryInfo": lambda handle: SimpleNamespace(total=80 << 30),
    }
    for name, function in patches.items():
        monkeypatch.setattr(pynvml, name, function)


@pytest.mark.usefixtures("four_gpus")
def test_without_an_allocation_every_gpu_is_offered() -> None:
    assert [d.index for d in nvml_devices({})] == [0, 1, 2, 3]


@pytest.mark.usefixtures("four_gpus")
def test_an_allocation_limits_the_gpus_by_index_or_uuid() -> None:
    assert [d.index for d in nvml_devices({"CUDA_VISIBLE_DEVICES": "2,3"})] == [2, 3]
    assert [d.index for d in nvml_devices({"CUDA_VISIBLE_DEVICES": "GPU-1aaa"})] == [1]
    assert nvml_devices({"CUDA_VISIBLE_DEVICES": ""}) == []  # given none


def test_simulated_gpus_take_the_allocations_indices_when_they_match_its_count() -> None:
    assert [d.index for d in simulated_devices(2, {"CUDA_VISIBLE_DEVICES": "2,3"})] == [2, 3]
    assert [d.index for d in simulated_devices(2, {})] == [0, 1]
    # A count that is not the allocation's: the agent was told something else on purpose.
    assert [d.index for d in simulated_devices(3, {"CUDA_VISIBLE_DEVICES": "2,3"})] == [0, 1, 2]
