"""Which GPUs this host offers: real ones through NVML, or simulated ones when told."""

from __future__ import annotations

import logging

from agents.protocol import Device

log = logging.getLogger(__name__)


def simulated_devices(count: int) -> list[Device]:
    """Declared devices for CPU-only hosts (local and compose clusters look like GPU hosts)."""
    return [Device(index=i, name="Simulated GPU", simulated=True) for i in range(count)]


def nvml_devices() -> list[Device]:
    """The host's NVIDIA GPUs, or none when there is no driver or no NVML."""
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
    """``--gpus N`` declares N simulated devices; otherwise ask NVML."""
    return simulated_devices(declared) if declared is not None else nvml_devices()
