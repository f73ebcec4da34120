"""TF_CONFIG for every task of a placed job.

The training cluster holds the chief, workers and ps that the job has; the sidecar evaluator
is kept out of it (a coordinator that sees an evaluator in its cluster waits for it) and gets a
TF_CONFIG that names only itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.vocabulary import TRAINING_ROLES, Role

TaskAddresses = Mapping[tuple[str, int], str]  # (role, index) → "host:port"


def cluster_spec(addresses: TaskAddresses) -> dict[str, list[str]]:
    """The training cluster: each training role that has tasks, its addresses by index."""
    cluster: dict[str, list[str]] = {}
    for role in TRAINING_ROLES:
        indices = sorted(index for r, index in addresses if r == role)
        if indices:
            if indices != list(range(len(indices))):
                raise ValueError(f"{role} indices must be 0..n-1, got {indices}")
            cluster[role.value] = [addresses[(role, index)] for index in indices]
    return cluster


def tf_config(
    addresses: TaskAddresses,
    role: str,
    index: int,
    *,
    cluster: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The TF_CONFIG of one task, as a dict (the agent serialises it into the environment).
    `cluster`: cluster_spec(addresses) if the caller has it already (one per job placed,
    not one per task)."""
    if role == Role.evaluator:
        return {
            "cluster": {role: [addresses[(role, index)]]},
            "task": {"type": role, "index": index},
        }
    training = cluster_spec(addresses) if cluster is None else cluster
    return {"cluster": training, "task": {"type": role, "index": index}}
