"""On a host with NVIDIA GPUs: does a warm task see exactly its CUDA_VISIBLE_DEVICES?

    python -m bench.gpu_warm_devices        # needs a GPU, PyTorch, pydantic and nvidia-ml-py

A check, not a benchmark (no GPU in CI). It asks NVML for the host's GPUs as the agent does
(agents.host.devices), then runs bench/gpu_probe.py as a task twice for each value of
CUDA_VISIBLE_DEVICES (an index, a UUID, empty, -1): cold (`python gpu_probe.py`) and warm,
in the agent's own agents.host.warm process, assigned over its socket as the pool assigns.
The warm process's preload imports PyTorch instead of TensorFlow (which need not be on a GPU
machine): like TensorFlow's, the import loads the CUDA libraries without initialising a
device. The two must print the same. A control preload that does initialise CUDA before its
assignment must print something else, or the check could not fail.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents.host import devices

ROOT = Path(__file__).resolve().parent.parent
PROBE = "gpu_probe.py"
ARGS = ["--epochs", "1"]

# The warm process: agents.host.warm with another preload; `touch` breaks it on purpose.
WARM = """
import sys
sys.path.insert(0, {root!r})
from agents.host import warm
def preload():
    import os
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import torch
    if {touch!r}:
        torch.zeros(1, device="cuda")
warm.preload = preload
warm.serve(int(sys.argv[1]))
"""


def last_json(output: str) -> dict[str, Any]:
    return dict(json.loads(output.strip().splitlines()[-1]))


def warm_start(base: dict[str, str], visible: str, *, touch: bool = False) -> dict[str, Any]:
    ours, theirs = socket.socketpair()
    code = WARM.format(root=str(ROOT), touch=touch)
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(theirs.fileno())],
        pass_fds=[theirs.fileno()],
        env={**base, "CUDA_VISIBLE_DEVICES": "0"},  # what the pool started it with
        stdout=subprocess.PIPE,
        text=True,
    )
    theirs.close()
    with ours, ours.makefile("rb") as lines:
        if not lines.readline():
            raise RuntimeError("the warm process ended before it was ready")
        assignment = {
            "type": "assign",
            "env": {**base, "CUDA_VISIBLE_DEVICES": visible},
            "cwd": str(ROOT / "bench"),
            "argv": [PROBE, *ARGS],
            "mode": "script",
        }
        ours.sendall(json.dumps(assignment).encode() + b"\n")
        output, _ = process.communicate(timeout=120)
    return {"exit_code": process.returncode, **last_json(output)}


def cold_start(base: dict[str, str], visible: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, PROBE, *ARGS],
        cwd=ROOT / "bench",
        env={**base, "CUDA_VISIBLE_DEVICES": visible},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {"exit_code": done.returncode, **last_json(done.stdout)}


def main() -> int:
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    found = devices.nvml_devices(base)
    print("NVML:", [device.model_dump() for device in found])
    if not found:
        print("no NVIDIA GPU here: nothing to check")
        return 2
    uuid = found[0].uuid or ""
    for given in ("0", uuid, "", "1"):
        seen = [d.index for d in devices.nvml_devices({**base, "CUDA_VISIBLE_DEVICES": given})]
        print(f"NVML within CUDA_VISIBLE_DEVICES={given!r}: {seen}")
    same = True
    for visible in ("0", uuid, "", "-1"):
        warm, cold = warm_start(base, visible), cold_start(base, visible)
        print(f"CUDA_VISIBLE_DEVICES={visible!r}\n  warm: {warm}\n  cold: {cold}")
        same = same and warm == cold and warm["exit_code"] == 0
    control = warm_start(base, "", touch=True)
    caught = control["device_count"] != 0
    print(f"control (CUDA initialised before the assignment): {control}")
    print(f"warm the same as cold: {same}; the control told apart: {caught}")
    return 0 if same and caught else 1


if __name__ == "__main__":
    sys.exit(main())
