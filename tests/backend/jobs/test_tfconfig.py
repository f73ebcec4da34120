"""TF_CONFIG, pinned to the exact JSON TensorFlow expects for each strategy."""

from __future__ import annotations

import json

import pytest

from backend.jobs.tfconfig import tf_config

PS_JOB = {
    ("chief", 0): "hosta:42000",
    ("worker", 0): "hosta:42001",
    ("worker", 1): "hostb:42000",
    ("ps", 0): "hostb:42001",
    ("evaluator", 0): "hostb:42002",
}


def dumped(role: str, index: int, addresses: dict[tuple[str, int], str]) -> str:
    return json.dumps(tf_config(addresses, role, index), sort_keys=True)


def test_parameter_server_worker() -> None:
    assert dumped("worker", 1, PS_JOB) == (
        '{"cluster": {"chief": ["hosta:42000"], "ps": ["hostb:42001"], '
        '"worker": ["hosta:42001", "hostb:42000"]}, "task": {"index": 1, "type": "worker"}}'
    )


def test_parameter_server_chief_and_ps_share_the_cluster() -> None:
    chief = tf_config(PS_JOB, "chief", 0)
    ps = tf_config(PS_JOB, "ps", 0)
    assert chief["cluster"] == ps["cluster"]
    assert chief["task"] == {"type": "chief", "index": 0}
    assert ps["task"] == {"type": "ps", "index": 0}


def test_evaluator_is_outside_the_training_cluster() -> None:
    assert dumped("evaluator", 0, PS_JOB) == (
        '{"cluster": {"evaluator": ["hostb:42002"]}, "task": {"index": 0, "type": "evaluator"}}'
    )
    for role, index in [("chief", 0), ("worker", 0), ("ps", 0)]:
        assert "evaluator" not in tf_config(PS_JOB, role, index)["cluster"]


def test_multi_worker_mirrored_without_chief() -> None:
    job = {("worker", 0): "a:1", ("worker", 1): "b:2"}
    assert dumped("worker", 0, job) == (
        '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": 0, "type": "worker"}}'
    )


def test_multi_worker_mirrored_with_chief() -> None:
    job = {("chief", 0): "a:1", ("worker", 0): "b:2", ("worker", 1): "c:3"}
    assert dumped("chief", 0, job) == (
        '{"cluster": {"chief": ["a:1"], "worker": ["b:2", "c:3"]}, '
        '"task": {"index": 0, "type": "chief"}}'
    )


def test_mirrored_single_task() -> None:
    assert dumped("chief", 0, {("chief", 0): "a:1"}) == (
        '{"cluster": {"chief": ["a:1"]}, "task": {"index": 0, "type": "chief"}}'
    )


def test_gaps_in_indices_are_refused() -> None:
    with pytest.raises(ValueError, match=r"indices must be 0\.\.n-1"):
        tf_config({("worker", 0): "a:1", ("worker", 2): "b:2"}, "worker", 0)
