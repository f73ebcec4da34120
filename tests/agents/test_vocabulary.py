"""Roles, strategies, task names and the task environment: the names every part shares."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel, ValidationError

from agents.environment import TaskEnvironment, TaskEnvironmentError, prefer_tf_keras
from agents.protocol import TaskHello, TaskKey
from agents.tls import CA_FILE_ENV
from agents.vocabulary import (
    MAX_TASK_INDEX,
    TASK_NAME_PATTERN,
    TRAINING_ROLES,
    Role,
    Strategy,
    TaskName,
    TaskNameText,
    format_task_name,
)


def test_roles_and_strategies_in_display_order() -> None:
    assert list(Role) == ["chief", "worker", "ps", "evaluator"]
    assert list(TRAINING_ROLES) == ["chief", "worker", "ps"]
    assert list(Strategy) == ["mirrored", "multi_worker_mirrored", "parameter_server"]
    # Members are the plain strings, so they compare, format and serialise as before.
    assert Role.worker == "worker" and f"{Strategy.mirrored}" == "mirrored"


@pytest.mark.parametrize(
    "text", ["chief:0", "worker:1", "ps:12", "evaluator:0", f"worker:{MAX_TASK_INDEX}"]
)
def test_task_names_round_trip(text: str) -> None:
    name = TaskName.parse(text)
    assert str(name) == text
    assert TaskName.parse(str(name)) == name
    assert re.fullmatch(TASK_NAME_PATTERN, text)


def test_a_task_name_has_a_typed_role_and_index() -> None:
    name = TaskName.parse("ps:3")
    assert (name.role, name.index) == (Role.ps, 3)
    assert name.role is Role.ps
    assert name == TaskName(Role.ps, 3)
    assert name.in_training_cluster and not TaskName.parse("evaluator:0").in_training_cluster
    assert TaskName("worker", 2).role is Role.worker  # type: ignore[arg-type]
    assert {TaskName.parse("worker:1"), TaskName(Role.worker, 1)} == {TaskName(Role.worker, 1)}
    # The unchecked formatter for known-good rows writes the same string.
    assert format_task_name("worker", 1) == str(TaskName(Role.worker, 1)) == "worker:1"


@pytest.mark.parametrize(
    "text",
    ["worker", "worker:", ":1", "boss:0", "worker:x", "worker:-1", "worker:01", "Worker:1",
     f"worker:{MAX_TASK_INDEX + 1}", "worker:1 ", " worker:1", "worker:1:2", ""],
)  # fmt: skip
def test_bad_task_names_say_what_was_expected(text: str) -> None:
    with pytest.raises(ValueError, match=r"^a task name must be role:index") as caught:
        TaskName.parse(text)
    message = str(caught.value)
    assert message.endswith(f"; got {text!r}")
    assert "chief, worker, ps, evaluator" in message and "worker:1" in message
    assert re.fullmatch(TASK_NAME_PATTERN, text) is None  # the pattern agrees with the parser


def test_a_task_name_is_built_from_a_known_role_and_a_bounded_index() -> None:
    with pytest.raises(ValueError, match="'boss' is not a role: expected one of chief, worker"):
        TaskName("boss", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index must be 0 to 9999, got -1"):
        TaskName(Role.worker, -1)
    with pytest.raises(ValueError, match="integer"):
        TaskName(Role.worker, True)


class _Named(BaseModel):
    typed: TaskName
    text: TaskNameText


def test_task_names_in_pydantic_models() -> None:
    model = _Named.model_validate_json('{"typed": "worker:1", "text": "ps:0"}')
    assert model.typed == TaskName(Role.worker, 1) and model.text == "ps:0"
    assert model.model_dump_json() == '{"typed":"worker:1","text":"ps:0"}'
    schema = _Named.model_json_schema()["properties"]
    for field in ("typed", "text"):
        assert schema[field]["type"] == "string"
        assert schema[field]["pattern"] == TASK_NAME_PATTERN
    with pytest.raises(ValidationError, match="a task name must be role:index"):
        _Named.model_validate({"typed": "boss:0", "text": "ps:0"})
    with pytest.raises(ValidationError, match="pattern"):
        _Named.model_validate({"typed": "ps:0", "text": "worker:01"})


def test_the_protocol_takes_task_names_from_the_one_definition() -> None:
    assert TaskKey(job_id=1, task="worker:1", attempt=0).task == "worker:1"
    for model, extra in ((TaskKey, {"job_id": 1}), (TaskHello, {})):
        with pytest.raises(ValidationError, match="pattern"):
            model.model_validate({**extra, "task": "boss:0", "attempt": 0})


# --- the task environment ------------------------------------------------------------------

FULL = TaskEnvironment(
    tf_config='{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}',
    visible_devices=TaskEnvironment.device_list([0, 3]),
    server="https://strata.test:8000",
    job_id=7,
    task=TaskName(Role.worker, 0),
    attempt=2,
    strategy=Strategy.multi_worker_mirrored,
    task_token="task-token",
    checkpoint_dir="/ckpt/job-7",
    checkpoint_policy='{"every_epochs": 1}',
    export='{"dir": "export", "format": "auto"}',
    strategy_options='{"communication": "ring"}',
    warm_start_from="/ckpt/job-6/ckpt-3",
    client_session=4,
    ca_file="/etc/strata/ca.pem",
    grpc_fail_fast="use_caller",
    legacy_keras="1",
    termination_file="/tmp/strata-termination.json",
    stop_file="/tmp/strata-termination.json.stop",
    stacks_signal=39,
    containment="local-0-1a2b3c4d/job7-worker-0-a2",
)


def test_the_environment_round_trips() -> None:
    env = FULL.to_env()
    assert env == {
        "TF_CONFIG": FULL.tf_config,
        "CUDA_VISIBLE_DEVICES": "0,3",
        "STRATA_SERVER": "https://strata.test:8000",
        "STRATA_JOB_ID": "7",
        "STRATA_TASK": "worker:0",
        "STRATA_ATTEMPT": "2",
        "STRATA_STRATEGY": "multi_worker_mirrored",
        "STRATA_TASK_TOKEN": "task-token",
        "STRATA_CHECKPOINT_DIR": "/ckpt/job-7",
        "STRATA_CHECKPOINT_POLICY": '{"every_epochs": 1}',
        "STRATA_EXPORT": '{"dir": "export", "format": "auto"}',
        "STRATA_STRATEGY_OPTIONS": '{"communication": "ring"}',
        "STRATA_WARM_START_FROM": "/ckpt/job-6/ckpt-3",
        "STRATA_CLIENT_SESSION": "4",
        CA_FILE_ENV: "/etc/strata/ca.pem",
        "GRPC_FAIL_FAST": "use_caller",
        "TF_USE_LEGACY_KERAS": "1",
        "STRATA_TERMINATION_FILE": "/tmp/strata-termination.json",
        "STRATA_STOP_FILE": "/tmp/strata-termination.json.stop",
        "STRATA_STACKS_SIGNAL": "39",
        "STRATA_CONTAINMENT": "local-0-1a2b3c4d/job7-worker-0-a2",
    }
    assert set(env) == TaskEnvironment.variables()
    assert TaskEnvironment.from_env(env) == FULL
    # Other variables of the process are none of its business.
    assert TaskEnvironment.from_env({**env, "PATH": "/bin", "HOME": "/root"}) == FULL


def test_no_gpus_is_an_empty_device_list_not_an_unset_one() -> None:
    told = TaskEnvironment(visible_devices=TaskEnvironment.device_list([]))
    assert told.to_env() == {"CUDA_VISIBLE_DEVICES": ""}
    assert TaskEnvironment.from_env(told.to_env()) == told
    # CUDA's other spellings pass through untouched (a script run by hand may use them).
    assert TaskEnvironment.from_env({"CUDA_VISIBLE_DEVICES": "-1"}).visible_devices == "-1"


def test_a_script_run_by_hand_has_no_task_environment() -> None:
    told = TaskEnvironment.from_env({"PATH": "/bin"})
    assert told == TaskEnvironment()
    assert told.to_env() == {}


def test_blank_values_are_unset() -> None:
    told = TaskEnvironment.from_env({"STRATA_TASK": "  ", "STRATA_ATTEMPT": " 3 "})
    assert told.task is None and told.attempt == 3


def test_bad_values_are_named_with_what_was_expected() -> None:
    env = {
        "STRATA_TASK": "boss:1",
        "STRATA_ATTEMPT": "x",
        "STRATA_JOB_ID": "0",
        "STRATA_STRATEGY": "tpu",
        "STRATA_SERVER": "http://fine.test",
    }
    with pytest.raises(TaskEnvironmentError) as caught:
        TaskEnvironment.from_env(env)
    message = str(caught.value)
    assert "STRATA_TASK='boss:1': a task name must be role:index" in message
    assert "STRATA_ATTEMPT='x'" in message and "integer" in message
    assert "STRATA_JOB_ID='0'" in message and "greater than or equal to 1" in message
    assert "STRATA_STRATEGY='tpu'" in message and "parameter_server" in message
    assert "STRATA_SERVER" not in message


def test_variable_names_come_from_the_model() -> None:
    assert TaskEnvironment.variable("task") == "STRATA_TASK"
    assert TaskEnvironment.variable("ca_file") == CA_FILE_ENV
    with pytest.raises(KeyError):
        TaskEnvironment.variable("nothing")


def test_prefer_tf_keras_leaves_a_choice_alone() -> None:
    environ: dict[str, str] = {}
    prefer_tf_keras(environ)
    assert environ == {"TF_USE_LEGACY_KERAS": "1"}
    chosen = {"TF_USE_LEGACY_KERAS": "0"}
    prefer_tf_keras(chosen)
    assert chosen == {"TF_USE_LEGACY_KERAS": "0"}
