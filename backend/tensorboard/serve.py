"""`python -m backend.tensorboard.serve ARGS`: TensorBoard (`tensorboard.main`) without TensorFlow.

TensorBoard imports TensorFlow when it can, for features the scalars the runtime writes do
not need; that costs the server's host about 600 MB and many seconds per TensorBoard. Its
TensorFlow-less mode is chosen by the presence of the module `tensorboard.compat.notf`, which
this launcher provides (empty) before TensorBoard starts.

It also exits when the server that started it is gone (it was killed, say), instead of
serving on as an orphan nobody stops.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from collections.abc import Callable

PARENT_POLL_SECONDS = 1.0
PARENT_ENV = "STRATA_TENSORBOARD_PARENT"  # the server's pid


def watch_parent(
    parent: int,
    *,
    getppid: Callable[[], int] = os.getppid,
    interval: float = PARENT_POLL_SECONDS,
    exit_now: Callable[[int], object] = os._exit,
) -> None:
    """Returns (after `exit_now(0)`) once this process's parent is no longer `parent`."""
    while getppid() == parent:
        time.sleep(interval)
    exit_now(0)


def main(argv: list[str]) -> None:
    # Named by the server (it may be gone before this line runs); else whoever started us.
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    threading.Thread(target=watch_parent, args=(parent,), daemon=True).start()
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
    from tensorboard.main import run_main

    sys.argv = ["tensorboard", *argv]
    run_main()


if __name__ == "__main__":
    main(sys.argv[1:])
