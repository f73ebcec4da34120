"""This process as the coordinator of a parameter_server job whose spec says
``coordinator: client``: a notebook kernel, a script on a laptop (`runtime.connect`).

Under ParameterServerStrategy the coordinator holds no variables: it sends functions to the
workers over gRPC. So it can run anywhere the workers and ps can be reached from, while
Strata keeps them serving on the fleet. `connect`:

1. waits for the job to be running (its workers and ps serve), submitting it first when
   given a spec;
2. attaches to it (POST /jobs/{id}/client): one client at a time, a second one refused with
   who holds it unless it takes over;
3. makes this process's environment a chief's (Strata's variables and TF_CONFIG, from the
   answer), so that `runtime.callbacks()` streams, checkpoints, backs up and exports as in a
   chief (metrics as chief:0, the session number its attempt);
4. says it is alive every few seconds from a daemon thread (a kernel killed or a laptop
   closed stops that: the server detaches it, and ends the job after its
   client_idle_timeout with no client);
5. returns a ParameterServerStrategy over the job's workers and ps.

The connections: HTTP and a websocket to the server, and gRPC to each worker and ps at the
addresses the server names, all from here; and one the other way: writing a checkpoint (or
reading one back), each ps computes its shard's file name from the coordinator's prefix, so
it dials the coordinator's own gRPC server. That serves at this machine's address towards the
workers and a free port, or at `address` and `port`.

The files the coordinator writes (checkpoints, backups, TensorBoard files, the export) land
at the job's checkpoint dir *as this machine sees the path*: on the fleet's shared
filesystem, or on the client's own disk. `checkpoint_dir=` names another place.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.environment import TaskEnvironment
from agents.runtime.backup import BACKUP_SUBDIR
from agents.runtime.strategy import Strategy, import_tensorflow, strategy_options
from agents.runtime.strategy import variable_partitioner as make_partitioner

log = logging.getLogger("strata.runtime")

RUNNING_WAIT_SECONDS = 600.0
POLL_SECONDS = 1.0
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
# A detach the server could not take (it restarting, or too busy to answer) is tried again
# after each of these pauses: without it the job counts the client attached until its
# heartbeats are missed.
DETACH_RETRY_SECONDS = (0.5, 1.0, 2.0, 4.0)


class ConnectError(RuntimeError):
    """The job cannot be coordinated from here, and why (`status`: the server's answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Connection:
    """This process's attachment to its job."""

    server: str
    token: str | None
    job_id: int
    session: int
    heartbeat_seconds: float
    strategy: Strategy = None
    lost: str | None = None  # why the server no longer counts it as the coordinator
    _stop: threading.Event = field(default_factory=threading.Event)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        return _request(self.server, self.token, method, path, body)

    def beat(self) -> None:
        """Heartbeats until detached; a refusal (taken over, the job ended) ends them."""
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                self.request("POST", f"/jobs/{self.job_id}/client/{self.session}/heartbeat")
            except ConnectError as exc:
                if exc.status is not None and exc.status >= 500:  # the server's trouble
                    log.info("strata: client heartbeat failed, retrying: %s", exc)
                    continue
                self.lost = str(exc)
                log.warning("strata: no longer job %s's coordinator: %s", self.job_id, exc)
                return
            except OSError as exc:  # the server restarting: keep trying
                log.info("strata: client heartbeat failed, retrying: %r", exc)

    def disconnect(self, pauses: tuple[float, ...] = DETACH_RETRY_SECONDS) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        path = f"/jobs/{self.job_id}/client/{self.session}"
        for pause in (*pauses, None):
            try:
                self.request("DELETE", path)
                return
            except ConnectError as exc:
                if exc.status is None or exc.status < 500:
                    return  # refused for good (taken over, the job ended): nothing to detach
                failure: Exception = exc
            except OSError as exc:
                failure = exc
            if pause is None:
                log.warning("strata: could not detach from job %s: %s", self.job_id, failure)
                return
            time.sleep(pause)


_connection: Connection | None = None


def _request(server: str, token: str | None, method: str, path: str, body: Any = None) -> Any:
    import httpx

    from agents.tls import client_ssl

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    verify = client_ssl(server, os.environ.get(TaskEnvironment.variable("ca_file"))) or True
    try:
        response = httpx.request(
            method, server + path, json=body, headers=headers, timeout=30.0, verify=verify
        )
    except httpx.TransportError as exc:
        raise OSError(f"cannot reach the Strata server at {server}: {exc}") from exc
    if response.is_error:
        try:
            detail = response.json().get("detail") or response.json()
        except ValueError:
            detail = response.text or response.reason_phrase
        raise ConnectError(
            f"{method} {path}: {response.status_code} {detail}", response.status_code
        )
    return None if response.status_code == 204 else response.json()


def wait_until_running(server: str, token: str | None, job_id: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    status = "unknown"
    while time.monotonic() < deadline:
        job = _request(server, token, "GET", f"/jobs/{job_id}")
        status = job["status"]
        if job["spec"].get("coordinator") != "client":
            raise ConnectError(
                f"job {job_id}'s coordinator is its chief task: runtime.connect needs a "
                "parameter_server job submitted with coordinator: client"
            )
        if status == "running":
            return
        if status in TERMINAL:
            raise ConnectError(f"job {job_id} is {status}: {job.get('reason') or ''}".rstrip())
        time.sleep(POLL_SECONDS)
    raise ConnectError(f"job {job_id} is still {status} after {timeout:.0f}s")


def usable_checkpoint_dir(path: str) -> None:
    """Refuses a checkpoint dir this process cannot write (the job's, on another machine)."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK):
        raise ConnectError(
            f"the job's checkpoint dir {path} cannot be written from here ({probe} is not a "
            "writable dir): mount the fleet's checkpoint root at the same path, or pass "
            "checkpoint_dir= a dir the job's evaluator can read too"
        )


def address_towards(target: str) -> str:
    """This machine's address on the route to `target` (host:port): the one the servers
    see its connections come from, and so the one they can dial back (no packet is sent)."""
    host, _, port = target.rpartition(":")
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host.strip("[]"), int(port)))
        return str(probe.getsockname()[0])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def coordinator_address(
    cluster: Mapping[str, list[str]], address: str | None, port: int | None
) -> str:
    """Where the servers reach this process: `address` (default: this machine's address
    towards the first worker) and `port` (default: a free one)."""
    host = address or address_towards(cluster["worker"][0])
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port or free_port()}"


def client_strategy(cluster: Mapping[str, list[str]], coordinator: str) -> Strategy:
    """ParameterServerStrategy over the workers and ps, this process the coordinator: the
    cluster's chief, serving at `coordinator` (the ps dial it when a checkpoint is written:
    each computes its shard's file name from the coordinator's prefix)."""
    tf = import_tensorflow()
    roles = {role: list(cluster[role]) for role in ("worker", "ps")}
    spec = tf.train.ClusterSpec({**roles, "chief": [coordinator]})
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type="chief", task_id=0, rpc_layer="grpc"
    )
    partitioner = make_partitioner(strategy_options(), len(cluster["ps"]))
    return tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def attach(server: str, token: str | None, job_id: int, take_over: bool) -> Any:
    """POST /jobs/{id}/client. The client still attached may be this machine's, dead (a
    kernel that crashed before it could detach): then it is taken over without asking, as
    the server would find it gone soon anyway."""
    host = socket.gethostname()
    body = {"host": host, "pid": os.getpid(), "take_over": take_over}
    try:
        return _request(server, token, "POST", f"/jobs/{job_id}/client", body)
    except ConnectError as exc:
        if exc.status != 409 or take_over:
            raise
        holder = _request(server, token, "GET", f"/jobs/{job_id}").get("client") or {}
        if not holder.get("attached") or holder.get("host") != host:
            raise
        if pid_alive(int(holder["pid"])):
            raise
        log.info("strata: taking over from client %s, whose process is gone", holder["session"])
        body["take_over"] = True
        return _request(server, token, "POST", f"/jobs/{job_id}/client", body)


def connect(
    job: int | Mapping[str, Any],
    *,
    server: str | None = None,
    token: str | None = None,
    take_over: bool = False,
    resume: bool = True,
    checkpoint_dir: str | None = None,
    address: str | None = None,
    port: int | None = None,
    timeout: float = RUNNING_WAIT_SECONDS,
) -> Connection:
    """Attach this process to the job as its coordinator (see the module docstring).

    `job` is a job's id, or a spec to submit. `server` and `token` default to
    STRATA_SERVER and STRATA_TOKEN, as for the CLI. `resume=False` starts a new model: the
    backup the last client left is removed, so `fit` begins at the first epoch. `address`
    and `port`: where the job's ps reach this process (default: its address towards the
    workers, a free port).
    """
    global _connection
    server = (server or os.environ.get("STRATA_SERVER") or "http://127.0.0.1:8000").rstrip("/")
    token = token or os.environ.get("STRATA_TOKEN")
    if isinstance(job, Mapping):
        job_id = int(_request(server, token, "POST", "/jobs", dict(job))["id"])
    else:
        job_id = int(job)
    if _connection is not None:
        if _connection.job_id == job_id and _connection.lost is None:
            return _connection
        raise ConnectError(
            f"this process coordinated job {_connection.job_id}: TensorFlow connects a "
            "process to one cluster, so restart the kernel (or the script) to coordinate "
            f"job {job_id}"
        )
    wait_until_running(server, token, job_id, timeout)
    attached = attach(server, token, job_id, take_over)
    env = dict(attached["env"]) | {TaskEnvironment.variable("server"): server}
    if checkpoint_dir is not None:
        env[TaskEnvironment.variable("checkpoint_dir")] = os.path.abspath(checkpoint_dir)
    directory = env.get(TaskEnvironment.variable("checkpoint_dir"))
    connection = Connection(
        server=server,
        token=token,
        job_id=job_id,
        session=int(attached["client"]["session"]),
        heartbeat_seconds=float(attached["heartbeat_seconds"]),
    )
    try:
        if directory is not None:
            usable_checkpoint_dir(directory)
            if not resume:
                shutil.rmtree(os.path.join(directory, BACKUP_SUBDIR), ignore_errors=True)
        coordinator = coordinator_address(attached["cluster"], address, port)
        config = json.loads(env["TF_CONFIG"])
        config["cluster"]["chief"] = [coordinator]
        env["TF_CONFIG"] = json.dumps(config)
        os.environ.update(env)
        connection.strategy = client_strategy(attached["cluster"], coordinator)
    except BaseException:
        connection.disconnect()
        raise
    threading.Thread(target=connection.beat, name="strata-client-heartbeat", daemon=True).start()
    atexit.register(connection.disconnect)
    _connection = connection
    log.info(
        "strata: coordinating job %s as client %s at %s (cluster %s)",
        job_id,
        connection.session,
        coordinator,
        json.dumps(attached["cluster"]),
    )
    return connection


def disconnect() -> None:
    """Detach from the job: the workers and ps keep serving for the next client."""
    if _connection is not None:
        _connection.disconnect()
