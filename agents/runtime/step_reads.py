"""A copy of the model's ``steps_per_execution`` in the training process, between its writes.

tf_keras's fit loop (``DataHandler.steps``, tf_keras 2.21) reads the model's
``_steps_per_execution`` variable with ``.numpy()`` before every step. That variable was
created in the strategy's scope. Under ParameterServerStrategy it lives on a parameter server:
every training step costs the coordinator's training thread a synchronous round trip to the
ps, and the ps the work of serving it. Under the mirrored strategies it is a MirroredVariable,
whose every read costs ~0.1 ms of CPU. All that for a number that only the process's own fit
ever changes (``compile``, the data handler's last partial execution, the steps-per-execution
tuner), and always through that same variable object.

So for the fit a callback sees, `keep_reads_local` answers ``numpy()`` from a copy taken at
the first read, and drops the copy on every ``assign``/``assign_add``/``assign_sub`` through
the object: the next read asks the variable again. These are instance attributes over the
variable's own methods, so everything else (reads inside traced functions, checkpoints) is
untouched, and a variable without those methods is left as it is. A script started by hand,
outside Strata, does not get this: its runtime callbacks are empty.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("strata.runtime")

_MARK = "_strata_local_reads"
_WRITES = ("assign", "assign_add", "assign_sub")


def keep_reads_local(model: Any) -> bool:
    """Installs the copy on ``model._steps_per_execution``; True when it is in place (now or
    from an earlier fit)."""
    variable: Any = getattr(model, "_steps_per_execution", None)
    if not hasattr(variable, "__dict__") or not all(
        callable(getattr(variable, name, None)) for name in (*_WRITES, "numpy")
    ):
        return False  # not a variable this knows how to wrap: its reads stay remote
    if getattr(variable, _MARK, False):
        return True
    read = variable.numpy
    lock = threading.Lock()
    copy: list[Any] = []  # empty: the next read asks the ps

    def numpy() -> Any:
        with lock:
            if copy:
                return copy[0].copy()  # callers may keep or change what they got
        value = read()
        with lock:
            copy[:] = [value.copy()]
        return value

    def dropping_copy(write: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with lock:
                copy.clear()
            try:
                return write(*args, **kwargs)
            finally:
                with lock:
                    copy.clear()  # a read that raced the write must not keep the old value

        return wrapped

    for name in _WRITES:
        setattr(variable, name, dropping_copy(getattr(variable, name)))
    variable.numpy = numpy
    setattr(variable, _MARK, True)
    log.debug("strata: steps_per_execution is read on the coordinator between writes")
    return True
