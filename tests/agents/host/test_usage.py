"""Usage samples: a real task's process tree (CPU time, resident memory) under each kind of
containment, and GPUs through a fake NVML (pynvml's functions replaced)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from agents.host.containment import Containments
from agents.host.supervisor import Supervisor
from agents.host.usage import GpuSampler, UsageSampler
from agents.protocol import AgentMessage, Device, StartTask, TaskKey, TaskStarted
from tests.support.strict import missing_dependency

KEY = TaskKey(job_id=3, task="worker:0", attempt=0)
MIB = 1 << 20

# The main process holds 64 MiB and starts a child, in a session of its own, that holds 96 MiB
# and spins; each says so once its memory is touched.
TREE = """
import subprocess, sys, time
held = bytearray(64 << 20)
code = "import sys; held = bytearray(96 << 20); print('child', flush=True)\\nwhile True: pass"
child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
print("main", flush=True)
time.sleep(600)
"""

PROBED: list[Containments] = []


@pytest.fixture(autouse=True)
def _remove_namespaces() -> Iterator[None]:
    yield
    while PROBED:
        PROBED.pop().close()


def containments(use_cgroups: bool) -> Containments:
    found = Containments.probe(f"test-{uuid.uuid4().hex[:12]}", use_cgroups=use_cgroups)
    PROBED.append(found)
    if use_cgroups and found.killer is None:
        missing_dependency("no cgroups this user can make (needs root or a delegated subtree)")
    return found


@pytest.mark.parametrize("use_cgroups", [True, False], ids=["cgroup", "process-tree"])
async def test_a_task_reports_the_cpu_and_memory_of_its_whole_process_tree(
    use_cgroups: bool,
) -> None:
    sent: list[AgentMessage] = []

    def send(message: AgentMessage) -> bool:
        sent.append(message)
        return True

    supervisor = Supervisor(
        Path.cwd(), "http://server.test", send, containments=containments(use_cgroups)
    )
    start = StartTask(
        key=KEY, argv=["python", "-c", TREE], working_dir=".", env={}, port=1, gpus=[]
    )
    await supervisor.start(start)
    assert any(isinstance(m, TaskStarted) for m in sent), sent
    sampler = UsageSampler(supervisor.attempts, every=0.0)
    try:
        for _ in range(200):  # both processes have touched their memory
            lines = supervisor._logs[KEY].lines
            if {"main", "child"} <= set(lines):
                break
            await asyncio.sleep(0.05)
        assert {"main", "child"} <= set(supervisor._logs[KEY].lines)
        first = sampler.due()
        await asyncio.sleep(0.5)
        second = sampler.due()
    finally:
        await supervisor.stop_all(1.0)
    assert first is not None and second is not None
    assert second.devices == []  # no GPU sampler: a simulated host reports none
    (stats,) = second.tasks
    assert stats.key == KEY
    assert stats.rss_bytes is not None and stats.rss_bytes >= (64 + 96) * MIB
    assert stats.cpu_seconds is not None and first.tasks[0].cpu_seconds is not None
    assert stats.cpu_seconds > first.tasks[0].cpu_seconds  # the child spins
    assert first.tasks[0].cpu_percent is None  # nothing to compare with yet
    assert stats.cpu_percent is not None and stats.cpu_percent > 0


def test_a_sample_is_due_only_every_so_often() -> None:
    now = [100.0]
    sampler = UsageSampler(dict, every=5.0, clock=lambda: now[0])
    assert sampler.due() is not None
    now[0] += 4.9
    assert sampler.due() is None
    now[0] += 0.2
    assert sampler.due() is not None


class FakeNvml:
    """NVML as pynvml exposes it, for two GPUs; GPU 1 cannot say its utilisation."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = False
        patches = {
            "nvmlInit": self.init,
            "nvmlShutdown": self.shutdown,
            "nvmlDeviceGetHandleByIndex": lambda index: f"handle-{index}",
            "nvmlDeviceGetUtilizationRates": self.utilization,
            "nvmlDeviceGetMemoryInfo": lambda handle: SimpleNamespace(
                used=(3 if handle == "handle-0" else 5) << 30, total=16 << 30, free=0
            ),
        }
        for name, function in patches.items():
            monkeypatch.setattr(pynvml, name, function)

    def init(self) -> None:
        self.open = True

    def shutdown(self) -> None:
        self.open = False

    def utilization(self, handle: str) -> SimpleNamespace:
        if handle == "handle-1":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=87, memory=40)


def test_real_gpus_are_sampled_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(monkeypatch)
    devices = [Device(index=0, name="A100"), Device(index=1, name="A100")]
    gpus = GpuSampler.open(devices)
    assert gpus is not None and nvml.open
    report = UsageSampler(dict, gpus).due()
    assert report is not None
    first, second = report.devices
    assert (first.index, first.utilization_percent) == (0, 87.0)
    assert (first.memory_used_bytes, first.memory_total_bytes) == (3 << 30, 16 << 30)
    assert (second.index, second.utilization_percent, second.memory_used_bytes) == (
        1,
        None,
        5 << 30,
    )
    gpus.close()
    assert not nvml.open


def test_simulated_gpus_are_not_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(monkeypatch)
    assert GpuSampler.open([Device(index=0, name="Simulated GPU", simulated=True)]) is None
    assert not nvml.open


def test_no_driver_means_no_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert GpuSampler.open([Device(index=0, name="A100")]) is None
