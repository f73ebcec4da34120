"""Prints what a task can tell about how it was started (tests/e2e/test_warm_starts.py)."""

import json
import os
import sys

import tensorflow as tf

print(
    "WARMCHECK "
    + json.dumps(
        {
            "argv": sys.argv,
            "file": __file__,
            "name": __name__,
            "path0": sys.path[0],
            "cwd": os.getcwd(),
            "spec": getattr(__spec__, "name", None),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpus": len(tf.config.list_physical_devices("GPU")),
            "task": json.loads(os.environ["TF_CONFIG"])["task"],
            "keras": tf.keras.__name__,
        }
    ),
    flush=True,
)
