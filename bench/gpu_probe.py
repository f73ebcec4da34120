"""The task script of bench/gpu_warm_devices.py: what a task sees of the GPUs and of itself."""

import json
import os
import sys

import torch  # type: ignore[import-not-found]


def uuids(count: int) -> list[str] | str:
    try:
        return [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]
    except AssertionError as exc:  # the CUDA runtime and the environment disagree
        return f"error: {exc}"


# The CUDA runtime's own count (cuInit reads CUDA_VISIBLE_DEVICES then), not torch's count,
# which NVML answers from the environment of the moment without initialising anything.
count = torch._C._cuda_getDeviceCount()
print(
    json.dumps(
        {
            "visible_env": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device_count": count,
            "uuids": uuids(count),
            "argv": sys.argv,
            "name": __name__,
            "file": __file__,
        }
    )
)
