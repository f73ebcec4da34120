"""Loaded by the interpreter at start when this folder is on PYTHONPATH (bench/scale.py does
that for the server it measures): appends the duration of every full garbage collection,
in milliseconds, to the file named by STRATA_BENCH_GC_LOG. py-spy cannot see collections
(they run in C, inside whatever Python frame allocated last), and at a thousand agents they
are what the slowest requests wait for."""

import gc
import os
import time

_path = os.environ.get("STRATA_BENCH_GC_LOG")
if _path:
    _began = [0.0]

    def _time_full_collections(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            _began[0] = time.perf_counter()
            return
        with open(_path, "a") as out:
            out.write(f"{time.time():.3f} {1000 * (time.perf_counter() - _began[0]):.1f}\n")

    gc.callbacks.append(_time_full_collections)
