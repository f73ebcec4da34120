"""The agent's health probes: free disk space on real file systems, NVML absent, and the
monitor that runs them off the heartbeat's path."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.host.gpu_health import GpuFindings
from agents.host.health import (
    FreeSpaceLimit,
    HealthMonitor,
    HostProbes,
    existing_ancestor,
    probe_disks,
)
from agents.protocol import Device, HostHealth


def test_free_space_limits_read_sizes_and_shares() -> None:
    assert FreeSpaceLimit.parse("1GiB").least(10 << 30) == 1 << 30
    assert FreeSpaceLimit.parse("2%").least(1000) == 20
    assert FreeSpaceLimit.parse("2%").words() == "2%"
    for bad in ("lots", "150%", "-1%"):
        with pytest.raises(ValueError):
            FreeSpaceLimit.parse(bad)


def test_a_disk_with_less_free_space_than_the_limit_is_a_fault(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    found = GpuFindings()
    probe_disks([tmp_path], FreeSpaceLimit(bytes=free + (1 << 40)), found)
    [fault] = found.faults
    assert (fault.kind, fault.path) == ("disk_space", str(tmp_path))
    assert "free, below" in fault.detail
    ample = GpuFindings()
    probe_disks([tmp_path], FreeSpaceLimit(bytes=1), ample)
    assert ample.faults == [] and ample.unknown == []


def test_one_report_per_file_system(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    found = GpuFindings()
    probe_disks([tmp_path, tmp_path / "a"], FreeSpaceLimit(percent=100), found)
    assert len(found.faults) == 1


def test_a_checkpoint_dir_not_made_yet_is_judged_by_the_nearest_existing_one(
    tmp_path: Path,
) -> None:
    assert existing_ancestor(tmp_path / "job-3" / "ckpt") == tmp_path
    probes = HostProbes(tmp_path / "workspace-missing", FreeSpaceLimit(percent=100))
    probes.watch_checkpoints(str(tmp_path / "job-3" / "ckpt"))
    report = probes.run()
    assert [f.path for f in report.faults] == [str(tmp_path / "workspace-missing")]


def test_simulated_gpus_have_nothing_to_probe(tmp_path: Path) -> None:
    probes = HostProbes.open(
        tmp_path, FreeSpaceLimit(bytes=1), [Device(index=0, name="sim", simulated=True)]
    )
    assert probes.gpus is None
    report = probes.run()
    assert (report.faults, report.warnings, report.unknown) == ([], [], [])


def test_real_gpus_without_nvml_are_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    probes = HostProbes.open(tmp_path, FreeSpaceLimit(bytes=1), [Device(index=0, name="A100")])
    report = probes.run()
    assert report.faults == []
    assert report.unknown == ["nvml: pynvml is not installed"]


def test_real_gpus_without_a_driver_are_unknown(tmp_path: Path) -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    probes = HostProbes.open(tmp_path, FreeSpaceLimit(bytes=1), [Device(index=0, name="A100")])
    [unknown] = probes.run().unknown
    assert unknown.startswith("nvml: ")


def _report(**fields: object) -> HostHealth:
    return HostHealth(checked_at=1.0, wall_time=1.0, **fields)


def _wait_for(monitor: HealthMonitor) -> HostHealth:
    for _ in range(500):
        report = monitor.due()
        if report is not None:
            return report
        time.sleep(0.01)
    raise AssertionError("no report came")


def test_the_monitor_hands_each_round_over_once_and_stamps_it() -> None:
    now = [0.0]
    monitor = HealthMonitor(lambda: _report(unknown=["x"]), every=10.0, clock=lambda: now[0])
    report = _wait_for(monitor)
    assert report.unknown == ["x"] and report.wall_time > 1.0
    assert monitor.due() is None  # handed over already; the next round is not due yet
    now[0] = 10.0
    assert _wait_for(monitor).unknown == ["x"]


def test_a_hung_probe_never_holds_the_heartbeat_and_is_reported_unknown() -> None:
    release = threading.Event()

    def hung() -> HostHealth:
        release.wait(10)
        return _report()

    now = [0.0]
    monitor = HealthMonitor(hung, every=1.0, clock=lambda: now[0], stuck=60.0)
    try:
        assert monitor.due() is None  # started the round, on its thread
        now[0] = 30.0
        assert monitor.due() is None  # still running: nothing, and no second round
        now[0] = 61.0
        stuck = monitor.due()
        assert stuck is not None and stuck.faults == []
        assert stuck.unknown == ["probes have not answered for 61s"]
        assert monitor.due() is None  # said once, not on every beat
    finally:
        release.set()


def test_a_probe_that_raises_is_unknown_not_a_fault() -> None:
    def broken() -> HostHealth:
        raise RuntimeError("statvfs exploded")

    report = _wait_for(HealthMonitor(broken))
    assert report.faults == []
    assert report.unknown == ["probes failed: statvfs exploded"]
