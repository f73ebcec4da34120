"""A real two-node Slurm cluster on this machine, for the Slurm backend's tests.

Debian's `slurm-wlm` and `munge` (installed by .ci/run): a `munged` with its own key and socket,
a `slurmctld`, and two `slurmd` (`n1`, `n2`), both on 127.0.0.1 with their own ports and the
machine's hostname as NodeHostname, each declaring 2 GPUs as GRES backed by character devices
made with mknod. Everything lives in one private temp dir; the Slurm commands find the cluster
through SLURM_CONF. Stopping it cancels the jobs and ends every process that carries the
cluster's marker in its environment (daemons, slurmstepd, job processes): nothing is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.postgres import free_port
from tests.support.strict import missing_dependency

NODES = ("n1", "n2")
GPUS_PER_NODE = 2
PARTITION = "debug"
# The daemons and commands a test needs, by the Debian package that has them.
TOOLS = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "squeue": "slurm-client",
    "scancel": "slurm-client",
    "sacct": "slurm-client",
    "scontrol": "slurm-client",
    "srun": "slurm-client",
}
# In every process of the cluster (daemons, steps, job processes): what stop() looks for.
MARKER = "STRATA_TEST_SLURM_CLUSTER"
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED")
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path=SBIN_PATH)


def require_slurm() -> dict[str, str]:
    """The path of each tool; a skip (a failure under STRATA_TEST_STRICT=1) naming what is
    missing when Slurm cannot run here."""
    found = {tool: _which(tool) for tool in TOOLS}
    missing = sorted({TOOLS[tool] for tool, path in found.items() if path is None})
    if missing:
        missing_dependency(
            f"Slurm is not installed: no {', '.join(t for t, p in found.items() if p is None)} "
            f"(apt-get install slurm-wlm munge; missing packages: {', '.join(missing)})"
        )
    if os.geteuid() != 0:
        missing_dependency("a test Slurm cluster runs its daemons as root (SlurmUser=root)")
    return {tool: path for tool, path in found.items() if path is not None}


@dataclass
class SlurmCluster:
    """A running test cluster: `env` is what a Slurm command needs (SLURM_CONF)."""

    root: Path
    conf: Path
    env: dict[str, str]
    tools: dict[str, str]
    hostname: str
    partition: str = PARTITION
    nodes: tuple[str, ...] = NODES
    gpus_per_node: int = GPUS_PER_NODE
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(
        self, *argv: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster (argv[0] is the tool's name)."""
        done = subprocess.run(
            [self.tools.get(argv[0], argv[0]), *argv[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.strip()}\n"
                f"{self.diagnostics()}"
            )
        return done

    def job_state(self, job_id: str) -> str | None:
        """The job's state as squeue shows it (None once it has left the queue)."""
        shown = self.run("squeue", "--noheader", "--jobs", job_id, "--format=%T", check=False)
        state = shown.stdout.strip()
        return state or None

    def wait_state(self, job_id: str, state: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while (seen := self.job_state(job_id)) != state:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} {seen}, not {state}, after {timeout}s")
            time.sleep(0.1)

    def wait_gone_or_ended(self, job_id: str, timeout: float = 30) -> str | None:
        """Until the job has ended (or left squeue); its last state."""
        deadline = time.monotonic() + timeout
        while (state := self.job_state(job_id)) in LIVE_STATES:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {state} after {timeout}s")
            time.sleep(0.2)
        return state

    def wait_gone(self, job_id: str, timeout: float = 30) -> None:
        """Until the job has left squeue (finished, whatever its outcome)."""
        deadline = time.monotonic() + timeout
        while (state := self.job_state(job_id)) is not None:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {state} after {timeout}s")
            time.sleep(0.2)

    def node_states(self) -> dict[str, str]:
        shown = self.run("sinfo", "--noheader", "--Node", "--format=%N %t", check=False)
        return dict(line.split() for line in shown.stdout.splitlines() if len(line.split()) == 2)

    def nodes_idle(self) -> bool:
        states = self.node_states()
        return all(states.get(node) == "idle" for node in self.nodes)

    def stop_controller(self) -> None:
        """Stop slurmctld (its state is saved: a restart finds the jobs again)."""
        process = self.processes["slurmctld"]
        process.terminate()
        process.wait(timeout=30)

    def start_controller(self) -> None:
        """Start slurmctld again from its saved state, and wait until it answers."""
        assert self.processes["slurmctld"].poll() is not None, "slurmctld is running"
        _start(self, "slurmctld", [self.tools["slurmctld"], "-D", "-f", str(self.conf)], self.env)
        _wait_for("slurmctld answering", lambda: bool(self.node_states()), self)

    def log(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else f"(no {path})"

    def diagnostics(self) -> str:
        """The daemons' last log lines, for a failure's message."""
        parts = [f"--- {name} ---\n{self.log(name)[-2000:]}" for name in self.processes]
        return "\n".join(parts)


def _write_config(
    root: Path, hostname: str, *, ctld_port: int, node_ports: Sequence[int], kill_wait: int
) -> Path:
    gres_lines = ["AutoDetect=off"]
    node_lines = []
    cpus = os.cpu_count() or 1
    for node, port in zip(NODES, node_ports, strict=True):
        devices = root / "dev" / node
        devices.mkdir(parents=True)
        for index in range(GPUS_PER_NODE):
            # Slurm only needs a character device to stand for each GPU (it opens none).
            os.mknod(devices / f"gpu{index}", 0o666 | 0o020000, os.makedev(1, 3))
        gres_lines.append(f"NodeName={node} Name=gpu File={devices}/gpu[0-{GPUS_PER_NODE - 1}]")
        node_lines.append(
            f"NodeName={node} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={cpus} RealMemory=1024 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        )
    (root / "gres.conf").write_text("\n".join(gres_lines) + "\n")
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=strata-test",
                f"SlurmctldHost={hostname}(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={root}/munge/socket",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool/%n",
                f"SlurmctldPidFile={root}/run/slurmctld.pid",
                f"SlurmdPidFile={root}/run/slurmd-%n.pid",
                f"SlurmctldLogFile={root}/log/slurmctld.log",
                f"SlurmdLogFile={root}/log/slurmd-%n.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "GresTypes=gpu",
                "MpiDefault=none",
                "ReturnToService=2",
                "SchedulerType=sched/backfill",
                # No slurmdbd: sacct reads the job completion file (sacct --completion).
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={root}/jobcomp.txt",
                "MailProg=/bin/true",
                # Finished jobs stay visible to squeue/scontrol for this long.
                "MinJobAge=60",
                "SlurmctldTimeout=10",
                "SlurmdTimeout=30",
                "InactiveLimit=0",
                f"KillWait={kill_wait}",
                *node_lines,
                f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES "
                "MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return conf


def _start(
    cluster: SlurmCluster, name: str, argv: Sequence[str], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    log = cluster.root / "log" / f"{name}.out"
    with log.open("wb") as output:
        process = subprocess.Popen(
            list(argv), env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    cluster.processes[name] = process
    return process


def _wait_for(
    what: str, ready: Callable[[], bool], cluster: SlurmCluster, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for name, process in cluster.processes.items():
            if process.poll() is not None:
                out = (cluster.root / "log" / f"{name}.out").read_text(errors="replace")
                raise AssertionError(
                    f"{name} exited with {process.returncode} while waiting for {what}:\n"
                    f"{out[-2000:]}\n{cluster.diagnostics()}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout}s\n{cluster.diagnostics()}")
        time.sleep(0.1)


@contextlib.contextmanager
def slurm_cluster(kill_wait: int = 2) -> Iterator[SlurmCluster]:
    """Start the cluster; on exit cancel its jobs and stop every process it started.
    `kill_wait`: seconds from Slurm's SIGTERM to its SIGKILL when it ends a job's processes."""
    tools = require_slurm()
    # A short path: munge's socket lives in it, and a unix socket path has at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="strata-slurm-"))
    hostname = socket.gethostname().split(".")[0]
    for sub in ("munge", "state", "spool", "run", "log"):
        (root / sub).mkdir(mode=0o700)
    conf = _write_config(
        root,
        hostname,
        ctld_port=free_port(),
        node_ports=[free_port() for _ in NODES],
        kill_wait=kill_wait,
    )
    env = {
        "PATH": os.environ.get("PATH", SBIN_PATH),
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "SLURM_CONF": str(conf),
        MARKER: str(root),
    }
    cluster = SlurmCluster(root=root, conf=conf, env=env, tools=tools, hostname=hostname)
    try:
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = root / "munge" / "socket"
        _start(
            cluster,
            "munged",
            [
                tools["munged"],
                "--foreground",
                "--force",  # the temp dir's parents are world-writable (sticky /tmp)
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--pid-file={root}/run/munged.pid",
                f"--log-file={root}/log/munged.log",
                f"--seed-file={root}/munge/seed",
            ],
            env,
        )
        _wait_for("munged's socket", socket_path.exists, cluster)
        _start(cluster, "slurmctld", [tools["slurmctld"], "-D", "-c", "-f", str(conf)], env)
        for node in NODES:
            (root / "spool" / node).mkdir()
            _start(
                cluster, f"slurmd-{node}", [tools["slurmd"], "-D", "-N", node, "-f", str(conf)], env
            )
        _wait_for("both nodes idle", cluster.nodes_idle, cluster, timeout=60)
        yield cluster
    finally:
        stop(cluster)


def stop(cluster: SlurmCluster) -> None:
    """Cancel the cluster's jobs, stop its daemons, end whatever carries its marker."""
    if "slurmctld" in cluster.processes and cluster.processes["slurmctld"].poll() is None:
        with contextlib.suppress(Exception):
            cluster.run("scancel", "--full", f"--partition={cluster.partition}", check=False)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                queued = cluster.run("squeue", "--noheader", "--format=%i %T", check=False)
                if not any(
                    line.split()[-1] in ("RUNNING", "COMPLETING", "PENDING")
                    for line in queued.stdout.splitlines()
                    if line.strip()
                ):
                    break
                time.sleep(0.2)
    for name in reversed(list(cluster.processes)):
        process = cluster.processes[name]
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for pid in marked_processes(cluster.root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while marked_processes(cluster.root) and time.monotonic() < deadline:
        time.sleep(0.1)
    shutil.rmtree(cluster.root, ignore_errors=True)


def marked_processes(root: Path) -> list[int]:
    """Processes whose environment carries this cluster's marker (this one excepted)."""
    wanted = f"{MARKER}={root}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
