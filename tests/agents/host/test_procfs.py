"""Process figures and the process table, from real processes (and a made-up /proc where exact
figures are wanted)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agents.host import procfs
from agents.host.procfs import cpu_times, free_cpus, process_figures

MIB = 1024 * 1024
# Holds 64 MiB and spins until its stdin closes; says when the memory is in use.
HOLDER = (
    "import sys, threading\n"
    "block = bytearray(64 * 1024 * 1024)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "threading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "STRATA_TEST_MARK": "procfs"},
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    yield child
    child.kill()
    child.wait()


def test_free_cpus_counts_the_idle_share_of_every_cpu() -> None:
    assert free_cpus((100.0, 1000.0), (250.0, 1200.0), cpus=4) == pytest.approx(3.0)
    assert free_cpus((100.0, 1000.0), (100.0, 1200.0), cpus=4) == 0.0
    assert free_cpus((5.0, 10.0), (5.0, 10.0), cpus=2) == 2.0  # no tick between: unknown, free
    measured = cpu_times()
    assert measured is not None and 0 <= measured[0] <= measured[1]


def test_process_figures_sum_the_processes_and_skip_those_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stat").write_text("cpu  1 2 3 4 5 6 7 8 0 0\nbtime 1700000000\n")
    for pid, name, utime, stime, pages in ((10, "a (b) c", 300, 100, 50), (11, "x", 5, 5, 10)):
        (tmp_path / str(pid)).mkdir()
        tail = " ".join(["S", "1", *["0"] * 9, str(utime), str(stime), *["0"] * 40])
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) {tail}\n")
        (tmp_path / str(pid) / "statm").write_text(f"999 {pages} 0 0 0 0 0\n")
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    figures = process_figures([10, 11, 12])
    ticks = os.sysconf("SC_CLK_TCK")
    assert figures.cpu_seconds == pytest.approx(410 / ticks)
    assert figures.rss_bytes == 60 * os.sysconf("SC_PAGE_SIZE")
    assert process_figures([12]).cpu_seconds is None


def test_a_live_process_has_figures_and_a_gone_one_has_none(
    holder: subprocess.Popen[str],
) -> None:
    rss = procfs.rss_bytes(holder.pid)
    assert rss is not None and rss >= 64 * MIB
    before = procfs.cpu_seconds(holder.pid)
    assert before is not None
    # The spinning thread keeps adding CPU time: wait for the next tick of it.
    while (procfs.cpu_seconds(holder.pid) or 0.0) <= before:
        pass
    both = process_figures([holder.pid, os.getpid()])
    assert both.rss_bytes is not None and both.rss_bytes >= rss
    assert both.cpu_seconds is not None and both.cpu_seconds > before
    holder.kill()
    holder.wait()
    assert procfs.cpu_seconds(holder.pid) is None and procfs.rss_bytes(holder.pid) is None


def test_the_table_has_each_processs_state_parent_group_and_environment(
    holder: subprocess.Popen[str],
) -> None:
    table = procfs.process_table()
    mine = table[holder.pid]
    assert (mine.parent, mine.group, mine.gone) == (os.getpid(), os.getpgid(0), False)
    # One process read alone: the same parent and group (its state letter flips between R
    # and S with the holder's spinning thread).
    alone = procfs.state(holder.pid)
    assert alone is not None and (alone.parent, alone.group) == (mine.parent, mine.group)
    assert b"STRATA_TEST_MARK=procfs" in procfs.environ(holder.pid)
    assert holder.pid in procfs.all_pids()
    holder.kill()
    os.waitid(os.P_PID, holder.pid, os.WEXITED | os.WNOWAIT)  # dead, not yet reaped
    zombie = procfs.state(holder.pid)
    assert zombie is not None and zombie.state == "Z" and zombie.gone
    holder.wait()
    assert procfs.state(holder.pid) is None and procfs.environ(holder.pid) == []


def test_thread_ids_name_every_thread_of_a_process() -> None:
    started = threading.Event()
    done = threading.Event()

    def wait() -> None:
        started.set()
        done.wait()

    thread = threading.Thread(target=wait)
    thread.start()
    started.wait()
    try:
        ids = procfs.thread_ids()
        assert os.getpid() in ids and thread.native_id in ids
    finally:
        done.set()
        thread.join()
