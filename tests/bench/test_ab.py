"""The A/B launch benchmark's variants and the environment each gives a by-hand task (no
TensorFlow: nothing is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.host.launcher import GRPC_OPTIONS_ENV
from bench.ab_env import Job, knob_env
from bench.ab_variants import (
    ALL_VARIANTS,
    HAND_VARIANTS,
    VariantError,
    parse_variants,
    rotated,
)
from bench.launch import QUICK, job_spec

TF_CONFIG = {
    "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
    "task": {"type": "worker", "index": 1},
}


def env_of(variant: str, tmp_path: Path) -> dict[str, str]:
    job = Job(
        job_spec("multi_worker_mirrored", QUICK, 0),
        7,
        "http://127.0.0.1:9",
        "admin-token",
        tmp_path,
    )
    return knob_env(HAND_VARIANTS[variant], "multi_worker_mirrored", "worker:1", TF_CONFIG, job)


def test_the_baseline_is_the_shell_scripts_environment(tmp_path: Path) -> None:
    env = env_of("hand", tmp_path)
    assert env["GRPC_FAIL_FAST"] == "use_caller"
    assert env["STRATA_STRATEGY"] == "multi_worker_mirrored"
    assert GRPC_OPTIONS_ENV not in env
    assert not {"STRATA_SERVER", "STRATA_TASK_TOKEN", "STRATA_CHECKPOINT_DIR"} & set(env)


def test_the_agents_environment_leaves_the_runtime_off(tmp_path: Path) -> None:
    env = env_of("hand+env", tmp_path)
    assert GRPC_OPTIONS_ENV in env
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["STRATA_TASK"] == "worker:1"
    assert not {"STRATA_SERVER", "STRATA_TASK_TOKEN", "STRATA_CHECKPOINT_DIR"} & set(env)


def test_only_the_grpc_options(tmp_path: Path) -> None:
    env = env_of("hand+grpc-options", tmp_path)
    assert set(env) - set(env_of("hand", tmp_path)) == {GRPC_OPTIONS_ENV}


def test_runtime_levels(tmp_path: Path) -> None:
    full = env_of("hand+runtime-callbacks", tmp_path)
    assert full["STRATA_SERVER"] == "http://127.0.0.1:9"
    assert full["STRATA_TASK_TOKEN"].startswith("st.7.")
    assert full["STRATA_CHECKPOINT_DIR"] == str(tmp_path / "job-7")
    backups = env_of("hand+backups", tmp_path)
    assert backups["STRATA_CHECKPOINT_DIR"] == str(tmp_path / "job-7")
    assert not {"STRATA_SERVER", "STRATA_TASK_TOKEN"} & set(backups)


def test_variant_lists() -> None:
    assert parse_variants("hand, strata,hand") == ["hand", "strata"]
    with pytest.raises(VariantError, match="hand\\+nope"):
        parse_variants("hand,hand+nope")
    with pytest.raises(VariantError, match="must include 'hand'"):
        parse_variants("strata")


def test_every_round_runs_every_variant_once_and_the_order_alternates() -> None:
    variants = list(ALL_VARIANTS)
    orders = [rotated(variants, number) for number in range(4)]
    assert all(sorted(order) == sorted(variants) for order in orders)
    assert len({tuple(order) for order in orders}) == 4
