"""`python -m backend.tensorboard.serve ARGS`: TensorBoard (`tensorboard.main`) without TensorFlow.

TensorBoard imports TensorFlow when it can, for features the scalars the runtime writes do
not need; that costs the server's host about 600 MB and many seconds per TensorBoard. Its
TensorFlow-less mode is chosen by the presence of the module `tensorboard.compat.notf`, which
this launcher provides (empty) before TensorBoard starts.
"""

from __future__ import annotations

import sys
import types


def main(argv: list[str]) -> None:
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
    from tensorboard.main import run_main

    sys.argv = ["tensorboard", *argv]
    run_main()


if __name__ == "__main__":
    main(sys.argv[1:])
