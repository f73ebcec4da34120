"""`python -m agents.runtime.server`: a parameter-server-strategy worker or ps task.

Under ParameterServerStrategy only the chief runs user code; workers and parameter servers are
plain `tf.distribute.Server`s that the coordinator drives over gRPC. They never finish on their
own, so the control plane stops them with SIGTERM once the chief has exited.

Exit codes (for the agent's supervisor):
  0  stopped by SIGTERM or SIGINT (the only way a healthy server ends)
  1  the server could not start (e.g. its port is taken)
  2  TF_CONFIG does not describe a task with an address in the cluster
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, NoReturn

from agents.runtime.cluster import ClusterConfigError, TFConfig, tf_config

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install_stop_handlers() -> threading.Event:
    """An event set by SIGTERM/SIGINT, installed before the slow TensorFlow import.

    Installed first so that a stop that arrives while TensorFlow loads is still a quiet exit 0
    rather than a KeyboardInterrupt traceback. Only the main thread may install handlers; in any
    other thread the event is simply never set and the default signal behaviour applies.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, on_signal)
    return stop


def start_server(config: TFConfig) -> Any:
    """Starts the gRPC server for this task; returns the `tf.distribute.Server`."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    # The evaluator is never part of the training cluster (see cluster.TRAINING_ROLES); keep it
    # out even if a TF_CONFIG names it, or the coordinator would try to reach it.
    cluster = {name: list(addrs) for name, addrs in config.cluster.items() if name != "evaluator"}
    return tf.distribute.Server(
        tf.train.ClusterSpec(cluster),
        job_name=config.task_type,
        task_index=config.task_index,
        protocol="grpc",
        start=True,
    )


def serve(config: TFConfig, stop: threading.Event | None = None) -> NoReturn:
    """Serves this task until SIGTERM/SIGINT, then exits the process with 0."""
    stop = install_stop_handlers() if stop is None else stop
    name = f"{config.task_type}:{config.task_index}"
    try:
        # Held in a local for the rest of the process: the server serves while it is alive.
        _server = start_server(config)
    except Exception as exc:  # TF raises UnknownError (port in use) and friends
        print(f"strata: cannot serve {name} at {config.address}: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    print(f"strata: serving {name} at {config.address}", flush=True)
    # A timed wait rather than server.join(): join() blocks inside C++ where Python signal
    # handlers never run, and the short timeout bounds the delay when the kernel hands the
    # signal to one of gRPC's threads instead of the main thread.
    while not stop.wait(0.5):
        pass
    print(f"strata: {name} stopped", flush=True)
    sys.stderr.flush()
    # gRPC servers have no clean shutdown in TF (Server.stop() is unimplemented) and interpreter
    # teardown can block on in-flight coordinator RPCs, so leave without running it.
    os._exit(0)


def main() -> int:
    stop = install_stop_handlers()
    try:
        config = tf_config()
    except ClusterConfigError as exc:
        print(f"strata: {exc}", file=sys.stderr)
        return 2
    if config is None:
        print("strata: TF_CONFIG is not set; nothing to serve", file=sys.stderr)
        return 2
    if config.address is None:
        print(
            f"strata: TF_CONFIG.task {config.task_type}:{config.task_index} has no address "
            "in TF_CONFIG.cluster",
            file=sys.stderr,
        )
        return 2
    serve(config, stop)


if __name__ == "__main__":
    sys.exit(main())
