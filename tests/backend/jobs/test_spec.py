"""Every job spec rule, checked with a spec that breaks it, and the messages users see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.protocol import TaskKey
from backend.errors import InvalidInput, UnsupportedMediaType
from backend.jobs.spec import parse_spec_document, validate_spec
from backend.scheduling.launch import JobLaunch
from tests.support.factories import make_spec


def replicas(**counts: int) -> dict[str, Any]:
    return {role: {"count": count} for role, count in counts.items()}


@pytest.mark.parametrize("strategy", ["parameter_server", "multi_worker_mirrored", "mirrored"])
def test_each_strategy_accepts_its_base_spec(strategy: str) -> None:
    spec = validate_spec(make_spec(strategy))
    assert spec.strategy == strategy
    assert spec.restart.policy == "on_failure"  # defaults filled in


def test_defaults_match_the_documented_spec() -> None:
    spec = validate_spec(make_spec())
    assert spec.working_dir == "."
    assert spec.replicas.evaluator.count == 0
    assert spec.checkpoint.every_epochs == 1
    assert (spec.restart.max_restarts, spec.restart.backoff_seconds) == (3, 2.0)


BAD_SPECS: list[tuple[str, dict[str, Any], str, str]] = [
    # (case, overrides, field named, words the message must contain)
    (
        "ps needs a chief",
        {"replicas": replicas(worker=2, ps=1)},
        "replicas.chief.count",
        "parameter_server needs exactly one chief",
    ),
    (
        "ps takes one chief only",
        {"replicas": replicas(chief=2, worker=2, ps=1)},
        "replicas.chief.count",
        "exactly one chief",
    ),
    (
        "ps needs a worker",
        {"replicas": replicas(chief=1, ps=1)},
        "replicas.worker.count",
        "parameter_server needs at least one worker",
    ),
    (
        "ps needs a ps",
        {"replicas": replicas(chief=1, worker=2)},
        "replicas.ps.count",
        "parameter_server needs at least one ps",
    ),
    (
        "mwm needs a worker",
        {"strategy": "multi_worker_mirrored", "replicas": replicas(chief=1)},
        "replicas.worker.count",
        "multi_worker_mirrored needs at least one worker",
    ),
    (
        "mwm takes no ps",
        {"strategy": "multi_worker_mirrored", "replicas": replicas(worker=2, ps=1)},
        "replicas.ps.count",
        "multi_worker_mirrored takes no ps",
    ),
    (
        "mwm at most one chief",
        {"strategy": "multi_worker_mirrored", "replicas": replicas(chief=2, worker=2)},
        "replicas.chief.count",
        "at most one chief",
    ),
    (
        "mirrored is one task",
        {"strategy": "mirrored", "replicas": replicas(worker=2)},
        "replicas",
        "mirrored is exactly one task",
    ),
    (
        "mirrored needs a task",
        {"strategy": "mirrored", "replicas": replicas()},
        "replicas",
        "mirrored is exactly one task",
    ),
    (
        "mirrored takes no ps",
        {"strategy": "mirrored", "replicas": replicas(chief=1, ps=1)},
        "replicas.ps.count",
        "mirrored takes no ps",
    ),
    (
        "one evaluator at most",
        {"replicas": replicas(chief=1, worker=1, ps=1, evaluator=2)},
        "replicas.evaluator.count",
        "at most one sidecar evaluator",
    ),
    (
        "negative count",
        {"replicas": replicas(chief=1, worker=-1, ps=1)},
        "replicas.worker.count",
        "greater than or equal to 0",
    ),
    (
        "absurd count",
        {"replicas": replicas(chief=1, worker=100000, ps=1)},
        "replicas.worker.count",
        "less than or equal to 256",
    ),
    (
        "too many tasks in all",
        {"replicas": replicas(chief=1, worker=256, ps=256)},
        "replicas",
        "at most 512 tasks",
    ),
    (
        "absurd gpus",
        {
            "replicas": {
                "chief": {"count": 1},
                "worker": {"count": 1, "gpus": 64},
                "ps": {"count": 1},
            }
        },
        "replicas.worker.gpus",
        "less than or equal to 16",
    ),
    (
        "count as a string",
        {"replicas": {"chief": {"count": "1"}, "worker": {"count": 1}, "ps": {"count": 1}}},
        "replicas.chief.count",
        "valid integer",
    ),
    (
        "unknown role",
        {"replicas": {**replicas(chief=1, worker=1, ps=1), "workers": {"count": 1}}},
        "replicas.workers",
        "unknown field; expected one of: chief, worker, ps, evaluator",
    ),
    ("unknown top-level field", {"gpus": 4}, "gpus", "unknown field; expected one of: name,"),
    (
        "unknown nested field",
        {"restart": {"policy": "never", "retries": 3}},
        "restart.retries",
        "unknown field; expected one of: policy, max_restarts, backoff_seconds",
    ),
    ("unknown strategy", {"strategy": "horovod"}, "strategy", "'mirrored'"),
    ("unknown restart policy", {"restart": {"policy": "always"}}, "restart.policy", "'never'"),
    (
        "negative backoff",
        {"restart": {"backoff_seconds": -1}},
        "restart.backoff_seconds",
        "greater than or equal to 0",
    ),
    (
        "absurd max_restarts",
        {"restart": {"max_restarts": 10**6}},
        "restart.max_restarts",
        "less than or equal to 100",
    ),
    (
        "shell string entrypoint",
        {"entrypoint": "python train.py --epochs 5"},
        "entrypoint",
        "argv list",
    ),
    ("empty program", {"entrypoint": ["", "train.py"]}, "entrypoint", "argv[0]"),
    ("NUL in argv", {"entrypoint": ["python", "a\x00b"]}, "entrypoint", "NUL"),
    ("non-string argv", {"entrypoint": ["python", 5]}, "entrypoint.1", "valid string"),
    ("name with a slash", {"name": "../etc"}, "name", "letters, digits"),
    ("name with control characters", {"name": "job\nname"}, "name", "letters, digits"),
    ("empty name", {"name": ""}, "name", "letters, digits"),
    ("long name", {"name": "x" * 64}, "name", "1-63 characters"),
    ("absolute working dir", {"working_dir": "/etc"}, "working_dir", "must be relative"),
    ("working dir escapes", {"working_dir": "jobs/../../.."}, "working_dir", "'..'"),
    ("checkpoint dir escapes", {"checkpoint": {"dir": "../elsewhere"}}, "checkpoint.dir", "'..'"),
    ("reserved env", {"env": {"TF_CONFIG": "{}"}}, "env", "set by Strata"),
    ("bad env name", {"env": {"1BAD": "x"}}, "env", "not a valid environment variable name"),
    ("env value not a string", {"env": {"BATCH": 64}}, "env.BATCH", "valid string"),
    ("priority out of range", {"priority": 1000}, "priority", "less than or equal to 100"),
    (
        "memory without a size",
        {
            "replicas": {
                "chief": {"count": 1},
                "ps": {"count": 1},
                "worker": {"count": 2, "memory": "lots"},
            }
        },
        "replicas.worker.memory",
        "not a memory size",
    ),
    (
        "memory too small to start anything",
        {
            "replicas": {
                "chief": {"count": 1},
                "ps": {"count": 1},
                "worker": {"count": 2, "memory": "1MiB"},
            }
        },
        "replicas.worker.memory",
        "must lie within 16 MiB and 64 TiB",
    ),
    (
        "client mode under multi_worker_mirrored",
        {
            "strategy": "multi_worker_mirrored",
            "replicas": replicas(worker=2),
            "coordinator": "client",
        },
        "coordinator",
        "multi_worker_mirrored has no client mode in TensorFlow 2",
    ),
    (
        "client mode with a chief",
        {"coordinator": "client"},
        "replicas.chief.count",
        "has no chief: the client that attaches with runtime.connect(job) is its coordinator",
    ),
    (
        "an idle timeout without a client",
        {"client_idle_timeout": 60.0},
        "client_idle_timeout",
        "only a job whose coordinator is the client",
    ),
    (
        "empty entrypoint",
        {"entrypoint": []},
        "entrypoint",
        "is required: the training code's argv",
    ),
    (
        "no entrypoint for a client job's evaluator",
        {
            "coordinator": "client",
            "entrypoint": [],
            "replicas": replicas(worker=1, ps=1, evaluator=1),
        },
        "entrypoint",
        "is required: the sidecar evaluator's argv",
    ),
    (
        "every_epochs zero",
        {"checkpoint": {"every_epochs": 0}},
        "checkpoint.every_epochs",
        "greater than or equal to 1",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [pytest.param(o, f, w, id=case) for case, o, f, w in BAD_SPECS],
)
def test_bad_spec_is_rejected_naming_the_field(
    overrides: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_spec(make_spec(**overrides))
    fields = {issue.field: issue.message for issue in caught.value.issues}
    assert field in fields, f"expected an issue on {field!r}, got {fields}"
    assert words in fields[field]


def test_a_tasks_memory_limit_travels_in_bytes_in_its_start_message(tmp_path: Path) -> None:
    spec = validate_spec(make_spec("mirrored", replicas={"chief": {"count": 1, "memory": "4GiB"}}))
    assert spec.replicas.chief.memory_bytes == 4 * 1024**3
    assert spec.replicas.worker.memory_bytes is None
    launch = JobLaunch.of(spec=spec, job_id=1, task_token="t", checkpoint_root=tmp_path)
    start = launch.start_message(
        key=TaskKey(job_id=1, task="chief:0", attempt=0), port=20000, gpus=[], tf_config={}
    )
    assert start.memory_limit == 4 * 1024**3


def test_a_job_of_servers_for_a_client_needs_no_entrypoint() -> None:
    spec = validate_spec(
        make_spec(coordinator="client", entrypoint=[], replicas=replicas(worker=2, ps=1))
    )
    assert (spec.coordinator, spec.client_idle_timeout, spec.entrypoint) == ("client", None, [])
    assert validate_spec(make_spec()).coordinator == "chief"


@pytest.mark.parametrize("missing", ["name", "strategy", "replicas"])
def test_required_fields(missing: str) -> None:
    spec = make_spec()
    del spec[missing]
    with pytest.raises(InvalidInput) as caught:
        validate_spec(spec)
    assert [(i.field, i.message) for i in caught.value.issues] == [
        (missing, "this field is required")
    ]


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_spec(make_spec(name="a/b", entrypoint="run.sh", priority="high"))
    assert {i.field for i in caught.value.issues} == {"name", "entrypoint", "priority"}


@pytest.mark.parametrize("document", [[1, 2], "a string", 42, None])
def test_a_spec_must_be_a_mapping(document: object) -> None:
    with pytest.raises(InvalidInput, match="must be a mapping of fields"):
        validate_spec(document)


def test_yaml_and_json_documents_parse_the_same() -> None:
    yaml_body = (
        b"name: a\nstrategy: mirrored\nentrypoint: [python, t.py]\nreplicas: {chief: {count: 1}}\n"
    )
    json_body = (
        b'{"name": "a", "strategy": "mirrored", "entrypoint": ["python", "t.py"],'
        b' "replicas": {"chief": {"count": 1}}}'
    )
    from_yaml = validate_spec(parse_spec_document(yaml_body, "application/yaml"))
    from_json = validate_spec(parse_spec_document(json_body, "application/json; charset=utf-8"))
    assert from_yaml == from_json


@pytest.mark.parametrize(
    ("body", "content_type", "words"),
    [
        (b"{not json", "application/json", "not valid JSON"),
        (b"name: [unclosed", "application/yaml", "not valid YAML"),
        (b"\xff\xfe", "application/json", "not valid UTF-8"),
    ],
)
def test_unparseable_bodies(body: bytes, content_type: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        parse_spec_document(body, content_type)


def test_unknown_media_type() -> None:
    with pytest.raises(UnsupportedMediaType, match="application/json or application/yaml"):
        parse_spec_document(b"name=a", "application/x-www-form-urlencoded")
