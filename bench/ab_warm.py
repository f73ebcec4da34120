"""By-hand tasks started as the agent starts a warm one, for the A/B launch benchmark's warm
knobs (bench/ab_variants.Knobs.warm): a process that imported TensorFlow and the runtime
(agents.host.warm) before it is given its task, over the same socket protocol, by the warm
pool's own code (WarmProcess.assign), without an agent around it.

`idle_import=False` runs the same module with its import at the scheduling it started with
instead of SCHED_IDLE (the one thing a warm process does that the cold start does not, besides
when it imports).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys

from agents.host.process import OutputProtocol
from agents.host.warm import CHANNEL_FLAG
from agents.host.warm_eligibility import warm_env
from agents.host.warm_pool import WarmProcess
from bench.harness import REPO

READY_SECONDS = 120.0

# `python -m agents.host.warm`, with its idle-priority import switched off.
_BUSY_IMPORT = (
    "import sys; import agents.host.warm as warm; del sys.path[0]; "
    "warm.import_at_idle_priority = lambda: None; warm.serve(int(sys.argv[2]))"
)


def warm_argv(fd: int, idle_import: bool) -> list[str]:
    if idle_import:
        return [sys.executable, "-m", "agents.host.warm", CHANNEL_FLAG, str(fd)]
    return [sys.executable, "-c", _BUSY_IMPORT, CHANNEL_FLAG, str(fd)]


async def start_warm(idle_import: bool) -> WarmProcess:
    """One warm process, once it says it is ready (RuntimeError if it does not)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    loop = asyncio.get_running_loop()
    early: list[tuple[int, bytes]] = []
    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: OutputProtocol(lambda fd, data: early.append((fd, data))),
            *warm_argv(theirs.fileno(), idle_import),
            cwd=REPO,
            env=warm_env(os.environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
            pass_fds=(theirs.fileno(),),
        )
    finally:
        theirs.close()
    process = WarmProcess(transport, protocol, ours, {}, early_output=early)
    data = b""
    async with asyncio.timeout(READY_SECONDS):
        while b"\n" not in data:
            chunk = await loop.sock_recv(ours, 65536)
            if not chunk:
                break
            data += chunk
    if b"\n" not in data or json.loads(data.split(b"\n")[0]).get("type") != "ready":
        process.discard()
        raise RuntimeError(f"a warm process did not get ready: {b''.join(d for _, d in early)!r}")
    return process
