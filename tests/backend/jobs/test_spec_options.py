"""The spec's export, strategy options and warm start: what is accepted, the messages for what
is not, and how each reaches the task's environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.environment import TaskEnvironment
from agents.options import ExportOptions, StrategyOptions
from agents.protocol import TaskKey
from backend.errors import InvalidInput
from backend.jobs.spec import validate_spec
from backend.scheduling.launch import WATCHDOG_VARIABLE, JobLaunch
from tests.support.factories import make_spec


def issues(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidInput) as caught:
        validate_spec(document)
    return {issue.field: issue.message for issue in caught.value.issues}


def environment(document: dict[str, Any]) -> TaskEnvironment:
    """The task variables a chief's start message carries, as the task reads them."""
    launch = JobLaunch.of(
        spec=validate_spec(document), job_id=7, task_token="t", checkpoint_root=Path("/ckpts")
    )
    env = launch.environment(
        key=TaskKey(job_id=7, task="chief:0", attempt=0),
        gpus=[],
        tf_config={"cluster": {}, "task": {"type": "chief", "index": 0}},
    )
    return TaskEnvironment.from_env(env)


# --- export -------------------------------------------------------------------------------


def test_no_export_by_default() -> None:
    spec = validate_spec(make_spec())
    assert spec.export is None
    assert environment(make_spec()).export is None


def test_an_empty_export_takes_the_defaults() -> None:
    spec = validate_spec(make_spec(export={}))
    assert spec.export == ExportOptions(dir="export", format="auto")
    told = environment(make_spec(export={}))
    assert told.export is not None
    assert ExportOptions.model_validate_json(told.export) == spec.export


@pytest.mark.parametrize("fmt", ["auto", "saved_model", "keras"])
@pytest.mark.parametrize("strategy", ["parameter_server", "multi_worker_mirrored", "mirrored"])
def test_every_format_under_every_strategy(strategy: str, fmt: str) -> None:
    spec = validate_spec(make_spec(strategy, export={"dir": "model.v2", "format": fmt}))
    assert spec.export is not None and spec.export.format == fmt


@pytest.mark.parametrize(
    ("export", "field", "words"),
    [
        ({"format": "onnx"}, "export.format", "'auto', 'saved_model' or 'keras'"),
        ({"dir": "../elsewhere"}, "export.dir", "a name inside the job's checkpoint dir"),
        ({"dir": "/abs/path"}, "export.dir", "no '/'"),
        ({"dir": "a/b"}, "export.dir", "no '/'"),
        ({"dir": ""}, "export.dir", "1-100"),
        ({"dir": "ckpt-3"}, "export.dir", "checkpoints or backups use"),
        ({"dir": "backup"}, "export.dir", "checkpoints or backups use"),
        ({"dir": "checkpoint"}, "export.dir", "checkpoints or backups use"),
        ({"dir": "x\x00y"}, "export.dir", "name inside"),
        ({"path": "x"}, "export.path", "unknown field; expected one of: dir, format"),
    ],
)
def test_a_bad_export_names_its_field(export: dict[str, Any], field: str, words: str) -> None:
    found = issues(make_spec(export=export))
    assert field in found, found
    assert words in found[field], found[field]


def test_export_must_be_a_mapping() -> None:
    found = issues(make_spec(export=True))
    assert "export" in found


# --- strategy options ------------------------------------------------------------------------


@pytest.mark.parametrize("communication", ["auto", "ring", "nccl"])
def test_communication_under_multi_worker_mirrored(communication: str) -> None:
    document = make_spec("multi_worker_mirrored", strategy_options={"communication": communication})
    spec = validate_spec(document)
    assert spec.strategy_options.communication == communication
    told = environment(document)
    assert told.strategy_options is not None
    assert json.loads(told.strategy_options) == {"communication": communication}


def test_partitioner_under_parameter_server() -> None:
    document = make_spec(
        strategy_options={"partitioner": {"min_shard_bytes": 1024, "max_shards": 4}}
    )
    spec = validate_spec(document)
    partitioner = spec.strategy_options.partitioner
    assert partitioner is not None
    assert (partitioner.min_shard_bytes, partitioner.max_shards) == (1024, 4)
    told = environment(document)
    assert told.strategy_options is not None
    read = StrategyOptions.model_validate_json(told.strategy_options)
    assert read == spec.strategy_options


def test_a_collective_timeout_under_multi_worker_mirrored() -> None:
    document = make_spec("multi_worker_mirrored", strategy_options={"collective_timeout": 600})
    told = environment(document)
    assert told.strategy_options is not None
    assert json.loads(told.strategy_options) == {"collective_timeout": 600.0}


@pytest.mark.parametrize("seconds", [0.5, 9.9])
def test_a_hang_timeout_under_ten_seconds_is_refused(seconds: float) -> None:
    found = issues(make_spec(hang_timeout=seconds))
    assert "must be 0 (no hang detection) or at least 10 seconds" in found["hang_timeout"]


def test_the_coordinator_watchdog_follows_the_hang_timeout() -> None:
    def env(document: dict[str, Any], default: float = 120.0) -> dict[str, str]:
        return JobLaunch.of(
            spec=validate_spec(document),
            job_id=7,
            task_token="t",
            checkpoint_root=Path("/ckpts"),
            hang_timeout=default,
        ).env

    assert env(make_spec())[WATCHDOG_VARIABLE] == "120"  # parameter_server: the default
    assert env(make_spec(hang_timeout=45.4))[WATCHDOG_VARIABLE] == "45"
    assert WATCHDOG_VARIABLE not in env(make_spec(hang_timeout=0))
    assert WATCHDOG_VARIABLE not in env(make_spec(), default=0)
    assert WATCHDOG_VARIABLE not in env(make_spec("multi_worker_mirrored"))
    own = make_spec(env={WATCHDOG_VARIABLE: "900"})
    assert env(own)[WATCHDOG_VARIABLE] == "900"  # the spec's own value wins


def test_no_strategy_options_leave_the_variable_unset() -> None:
    assert environment(make_spec()).strategy_options is None
    # A partitioner of defaults only is still a choice: it is passed on.
    told = environment(make_spec(strategy_options={"partitioner": {}}))
    assert told.strategy_options is not None
    assert json.loads(told.strategy_options) == {"partitioner": {"min_shard_bytes": 262144}}


@pytest.mark.parametrize(
    ("base", "options", "field", "words"),
    [
        (
            "parameter_server",
            {"communication": "ring"},
            "strategy_options.communication",
            "multi_worker_mirrored only; this job is parameter_server",
        ),
        (
            "mirrored",
            {"communication": "nccl"},
            "strategy_options.communication",
            "multi_worker_mirrored only; this job is mirrored",
        ),
        (
            "multi_worker_mirrored",
            {"partitioner": {"max_shards": 2}},
            "strategy_options.partitioner",
            "parameter_server only; this job is multi_worker_mirrored",
        ),
        (
            "multi_worker_mirrored",
            {"communication": "grpc"},
            "strategy_options.communication",
            "'auto', 'ring' or 'nccl'",
        ),
        (
            "parameter_server",
            {"partitioner": {"min_shard_bytes": 0}},
            "strategy_options.partitioner.min_shard_bytes",
            "greater than or equal to 1",
        ),
        (
            "parameter_server",
            {"partitioner": {"max_shards": 5000}},
            "strategy_options.partitioner.max_shards",
            "less than or equal to 1024",
        ),
        (
            "parameter_server",
            {"partitioner": {"max_shards": "2"}},
            "strategy_options.partitioner.max_shards",
            "valid integer",
        ),
        (
            "parameter_server",
            {"collective_timeout": 60},
            "strategy_options.collective_timeout",
            "multi_worker_mirrored only; this job is parameter_server",
        ),
        (
            "parameter_server",
            {"sharding": 2},
            "strategy_options.sharding",
            "expected one of: communication, partitioner, collective_timeout",
        ),
    ],
)
def test_a_strategy_option_of_another_strategy_is_refused(
    base: str, options: dict[str, Any], field: str, words: str
) -> None:
    found = issues(make_spec(base, strategy_options=options))
    assert field in found, found
    assert words in found[field], found[field]


# --- warm start ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/ckpts/job-3/ckpt-8", "/ckpts/job-3", "/data/run 1/ckpt-1"])
def test_warm_start_from_an_absolute_path(path: str) -> None:
    document = make_spec(checkpoint={"warm_start_from": path})
    assert validate_spec(document).checkpoint.warm_start_from == path
    told = environment(document)
    assert told.warm_start_from == path
    # Not part of the checkpoint policy the runtime parses.
    assert told.checkpoint_policy is not None
    assert "warm_start_from" not in json.loads(told.checkpoint_policy)


def test_no_warm_start_by_default() -> None:
    assert environment(make_spec()).warm_start_from is None


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("job-3/ckpt-8", "must be an absolute path"),
        ("/ckpts/\x00/ckpt-1", "NUL or control characters"),
        ("/ckpts/a\nb", "NUL or control characters"),
        ("/" + "a" * 600, "at most 512 characters"),
        ("/ckpts/../etc/ckpt-1", "without '..' parts"),
        ("/", "must name a checkpoint"),
    ],
)
def test_a_bad_warm_start_path_is_refused(path: str, words: str) -> None:
    found = issues(make_spec(checkpoint={"warm_start_from": path}))
    assert "checkpoint.warm_start_from" in found, found
    assert words in found["checkpoint.warm_start_from"], found
