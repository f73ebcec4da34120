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

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, NoReturn

from agents.environment import prefer_tf_keras
from agents.runtime.cluster import ClusterConfigError, TFConfig, tf_config
from agents.runtime.stacks import install as install_stacks
from agents.runtime.stop_signals import from_its_agent, held_back, say
from agents.vocabulary import Role

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_on_stop_signals(name: str) -> None:
    """Makes SIGTERM/SIGINT end the process at once with exit code 0 and one log line.

    Installed before the slow TensorFlow import, so that a stop that arrives while TensorFlow
    loads is just as prompt and quiet (no KeyboardInterrupt traceback). The exit skips
    interpreter teardown on purpose: gRPC servers have no clean shutdown in TF
    (`Server.stop()` is unimplemented) and tearing one down can block on in-flight RPCs from
    the coordinator. Only the main thread may install handlers; elsewhere this does nothing and
    the default signal behaviour applies.
    """

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGTERM and not from_its_agent():
            say(held_back(name))  # the chief may still need it for the notice's checkpoint
            return
        # os.write, not print: the handler may interrupt a print in progress on the main thread.
        line = f"strata: {name} stopped ({signal.Signals(signum).name})\n"
        with contextlib.suppress(OSError):
            os.write(sys.stdout.fileno(), line.encode())
        os._exit(0)

    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, on_signal)


def start_server(config: TFConfig) -> Any:
    """Starts the gRPC server for this task; returns the `tf.distribute.Server`."""
    prefer_tf_keras(os.environ)
    import tensorflow as tf

    # The evaluator is never part of the training cluster (see cluster.TRAINING_ROLES); keep it
    # out even if a TF_CONFIG names it, or the coordinator would try to reach it.
    cluster = {
        name: list(addrs) for name, addrs in config.cluster.items() if name != Role.evaluator
    }
    return tf.distribute.Server(
        tf.train.ClusterSpec(cluster),
        job_name=config.task_type,
        task_index=config.task_index,
        protocol="grpc",
        start=True,
    )


def serve(config: TFConfig) -> NoReturn:
    """Serves this task until SIGTERM/SIGINT, which exit the process with 0."""
    name = f"{config.task_type}:{config.task_index}"
    exit_on_stop_signals(name)
    install_stacks()
    try:
        # Held in a local for the rest of the process: the server serves while it is alive.
        _server = start_server(config)
    except Exception as exc:  # TF raises UnknownError (port in use) and friends
        print(f"strata: cannot serve {name} at {config.address}: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    print(f"strata: serving {name} at {config.address}", flush=True)
    # Sleeping in Python rather than in server.join(): join() blocks inside C++, where Python
    # signal handlers never run. The kernel normally interrupts the main thread's sleep at
    # once; the short period only bounds the delay when a gRPC thread takes the signal.
    while True:
        time.sleep(0.5)


def main() -> int:
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
    serve(config)


if __name__ == "__main__":
    sys.exit(main())
