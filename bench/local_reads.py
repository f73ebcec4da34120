"""`python -m bench.local_reads SCRIPT [ARGS...]`: a training script run as `python SCRIPT ARGS`
runs it, with the runtime's coordinator-side copy of ``steps_per_execution``
(agents.runtime.step_reads) installed at every ``fit`` and nothing else of the runtime.

The A/B launch benchmark's ``local_reads`` knob: by hand with the one thing the runtime does
that a hand-written script does not, so that Strata's remaining cost can be told apart from
what that one thing gains.
"""

from __future__ import annotations

import runpy
import sys
from typing import Any


def install() -> None:
    import tf_keras

    from agents.runtime.step_reads import keep_reads_local

    class KeepReadsLocal(tf_keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_begin(self, logs: Any = None) -> None:
            keep_reads_local(self.model)

    fit = tf_keras.Model.fit

    def fit_keeping_reads_local(self: Any, *args: Any, callbacks: Any = None, **kwargs: Any) -> Any:
        return fit(self, *args, callbacks=[*(callbacks or []), KeepReadsLocal()], **kwargs)

    tf_keras.Model.fit = fit_keeping_reads_local


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m bench.local_reads SCRIPT [ARGS...]")
    install()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
