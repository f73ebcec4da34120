"""Several `strata server` replicas on one PostgreSQL database behind a real HAProxy, with
agents and clients that reach them only through the load balancer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.cluster import Cluster
from tests.support.haproxy import load_balancer
from tests.support.postgres import free_port
from tests.support.processes import STRATA, stop, wait_healthy


@dataclass
class Replica:
    index: int
    port: int
    data_dir: Path
    args: list[str]
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = (self.data_dir.parent / f"replica-{self.index}.log").open("ab")
        self.process = subprocess.Popen(
            self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        wait_healthy(self.url, self.process)

    def signal(self, number: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(number)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def health(self) -> dict[str, object] | None:
        """Its /healthz, or None when it does not answer."""
        try:
            answer = httpx.get(f"{self.url}/healthz", timeout=1.0)
        except httpx.HTTPError:
            return None
        found: dict[str, object] = answer.json()
        return found if answer.status_code == 200 else None


@dataclass
class ReplicaSet(Cluster):
    replicas: list[Replica] = field(default_factory=list)

    def leader(self) -> Replica | None:
        leading = [r for r in self.replicas if (h := r.health()) and h["role"] == "leader"]
        assert len(leading) <= 1, [r.index for r in leading]
        return leading[0] if leading else None

    def through(self, replica: Replica) -> Cluster:
        """This cluster with its requests sent straight to `replica`, not the load balancer
        (its agents stay behind the load balancer)."""
        http = httpx.Client(
            base_url=replica.url,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )
        return Cluster(
            url=replica.url,
            admin_token=self.admin_token,
            agent_token=self.agent_token,
            data_dir=self.data_dir,
            http=http,
            process=self.process,
            task_server=self.url,
        )

    def restore(self) -> None:
        """Every replica running again, as a supervisor would have it."""
        for replica in self.replicas:
            if replica.process is not None and replica.process.poll() is None:
                replica.signal(signal.SIGCONT)
            else:
                replica.start()

    def wait_leader(self, timeout: float = 30, other_than: Replica | None = None) -> Replica:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.leader()
            if found is not None and found is not other_than:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no replica (other than {other_than}) led within {timeout}s")


@contextlib.contextmanager
def replica_set(
    directory: Path,
    database_url: str,
    *,
    replicas: int = 3,
    agents: int = 2,
    env: dict[str, str] | None = None,
) -> Iterator[ReplicaSet]:
    """`replicas` servers on `database_url`, each with its own data dir and one shared dir,
    behind HAProxy, and `agents` agents (`ha-<i>`, two GPUs each) that reach them through it;
    the cluster's URL is the load balancer's."""
    admin, agent = "replicas-admin-token", "replicas-agent-token"
    shared = directory / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    made = []
    for index in range(replicas):
        port = free_port()
        data_dir = directory / f"replica-{index}"
        data_dir.mkdir(parents=True, exist_ok=True)
        made.append(
            Replica(
                index=index,
                port=port,
                data_dir=data_dir,
                args=[*STRATA, "server"],
                env={
                    **os.environ,
                    "STRATA_API_TOKEN": admin,
                    "STRATA_AGENT_TOKEN": agent,
                    "STRATA_DATA_DIR": str(data_dir),
                    "STRATA_SHARED_DIR": str(shared),
                    "STRATA_DATABASE_URL": database_url,
                    "STRATA_PORT": str(port),
                    # Twice the defaults: three servers, two agents and two training jobs on
                    # a CI machine's cores must not lose a lease or a host to a slow moment.
                    "STRATA_LEADER_LEASE_SECONDS": "8",
                    "STRATA_HEARTBEAT_TIMEOUT_SECONDS": "12",
                    "STRATA_STOP_GRACE_SECONDS": "5",
                    **(env or {}),
                },
            )
        )
    try:
        for replica in made:
            replica.start()
        with load_balancer([f"127.0.0.1:{r.port}" for r in made], directory / "haproxy") as lb:
            cluster = ReplicaSet(
                url=lb.url,
                admin_token=admin,
                agent_token=agent,
                data_dir=directory,
                http=httpx.Client(
                    base_url=lb.url, headers={"Authorization": f"Bearer {admin}"}, timeout=30
                ),
                process=made[0].process or subprocess.Popen(["true"]),
                replicas=made,
            )
            try:
                for index in range(agents):
                    cluster.start_agent(
                        f"ha-{index}", 2, f"{25000 + 100 * index}-{25099 + 100 * index}"
                    )
                for index in range(agents):
                    cluster.wait_host(f"ha-{index}", "online")
                yield cluster
            finally:
                cluster.stop_extra_agents()
                cluster.http.close()
    finally:
        for replica in made:
            if replica.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    replica.process.send_signal(signal.SIGCONT)
                stop(replica.process)
