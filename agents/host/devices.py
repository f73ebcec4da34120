"""Which GPUs this host offers: real ones through NVML, or simulated ones when told."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from agents.protocol import Device

log = logging.getLogger(__name__)


VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_entries(environ: Mapping[str, str]) -> list[str] | None:
    """What the agent itself was given to use (a scheduler's allocation, e.g. Slurm's GRES):
    CUDA_VISIBLE_DEVICES' entries (indices or GPU UUIDs), or None when it is unset."""
    value = environ.get(VISIBLE)
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def simulated_devices(count: int, environ: Mapping[str, str] | None = None) -> list[Device]:
    """Declared devices for CPU-only hosts (local and compose clusters look like GPU hosts).
    Inside an allocation that names exactly `count` device indices, those are their indices,
    so that each task's CUDA_VISIBLE_DEVICES names the devices the allocation holds."""
    given = visible_entries(os.environ if environ is None else environ)
    indices = (
        [int(entry) for entry in given]
        if given is not None and len(given) == count and all(e.isdigit() for e in given)
        else list(range(count))
    )
    return [Device(index=i, name="Simulated GPU", simulated=True) for i in indices]


def nvml_devices(environ: Mapping[str, str] | None = None) -> list[Device]:
    """The host's NVIDIA GPUs, or none when there is no driver or no NVML; only those its own
    CUDA_VISIBLE_DEVICES names (by index or UUID) when it has one."""
    given = visible_entries(os.environ if environ is None else environ)
    return [
        device
        for device in _all_nvml_devices()
        if given is None or str(device.index) in given or (device.uuid or "") in given
    ]


def _all_nvml_devices() -> list[Device]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("no NVIDIA driver found (%s); offering no GPUs", exc)
        return []
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append(
                Device(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    memory_mb=int(memory.total) // (1 << 20),
                )
            )
        return devices
    finally:
        pynvml.nvmlShutdown()


def discover(declared: int | None) -> list[Device]:
    """``--gpus N`` declares N simulated devices; otherwise ask NVML (both within the agent's
    own CUDA_VISIBLE_DEVICES, when a scheduler set it)."""
    return simulated_devices(declared) if declared is not None else nvml_devices()
