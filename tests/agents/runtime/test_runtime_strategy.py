"""The runtime's view of its task: role(), strategy inference from the environment, the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import runtime
from agents.options import StrategyOptions
from agents.runtime import cluster
from agents.runtime.cluster import ClusterConfigError, parse_tf_config, strategy_name
from tests.support.postgres import free_port

REPO = Path(__file__).resolve().parents[3]


def tf_config(cluster_spec: dict[str, list[str]], task_type: str, index: int = 0) -> str:
    return json.dumps({"cluster": cluster_spec, "task": {"type": task_type, "index": index}})


PS_CLUSTER = {
    "chief": ["127.0.0.1:42000"],
    "worker": ["127.0.0.1:42001", "127.0.0.1:42002"],
    "ps": ["127.0.0.1:42003"],
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No task variables from the surrounding shell, and no strategy cached by another test."""
    for name in ("TF_CONFIG", "STRATA_TASK", "STRATA_STRATEGY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(runtime, "_strategy", None)
    yield


def test_role_prefers_strata_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_TASK", "worker:1")
    monkeypatch.setenv("TF_CONFIG", tf_config(PS_CLUSTER, "chief"))
    assert runtime.role() == "worker"


@pytest.mark.parametrize("task_type", ["chief", "worker", "ps"])
def test_role_from_tf_config(monkeypatch: pytest.MonkeyPatch, task_type: str) -> None:
    monkeypatch.setenv("TF_CONFIG", tf_config(PS_CLUSTER, task_type))
    assert runtime.role() == task_type


def test_role_of_evaluator_outside_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "evaluator", "index": 0}}))
    assert runtime.role() == "evaluator"


def test_role_of_a_hand_run_script_is_chief() -> None:
    assert runtime.role() == "chief"


@pytest.mark.parametrize("value", ["worker", "worker:x", "boss:0", ":1"])
def test_bad_strata_task_is_rejected(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("STRATA_TASK", value)
    with pytest.raises(ClusterConfigError, match="STRATA_TASK"):
        runtime.role()


@pytest.mark.parametrize("name", ["mirrored", "multi_worker_mirrored", "parameter_server"])
def test_strategy_name_from_strata_strategy(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # The agent's word wins even over a TF_CONFIG that would infer something else.
    monkeypatch.setenv("TF_CONFIG", tf_config({"chief": ["127.0.0.1:1"]}, "chief"))
    monkeypatch.setenv("STRATA_STRATEGY", name)
    assert strategy_name() == name


def test_unknown_strata_strategy_names_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_STRATEGY", "tpu")
    with pytest.raises(ClusterConfigError, match="parameter_server"):
        strategy_name()


@pytest.mark.parametrize(
    ("cluster_spec", "expected"),
    [
        (PS_CLUSTER, "parameter_server"),
        ({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "multi_worker_mirrored"),
        ({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "multi_worker_mirrored"),
        ({"chief": ["127.0.0.1:1"]}, "mirrored"),
        ({"worker": ["127.0.0.1:1"]}, "mirrored"),
        # The evaluator is not a training task: it does not make a job multi-worker.
        ({"chief": ["127.0.0.1:1"], "evaluator": ["127.0.0.1:2"]}, "mirrored"),
    ],
)
def test_strategy_inferred_from_tf_config(
    monkeypatch: pytest.MonkeyPatch, cluster_spec: dict[str, list[str]], expected: str
) -> None:
    first_role = next(iter(cluster_spec))
    monkeypatch.setenv("TF_CONFIG", tf_config(cluster_spec, first_role))
    assert strategy_name() == expected


def test_strategy_without_tf_config_is_mirrored() -> None:
    assert strategy_name() == "mirrored"


def test_env_can_be_passed_instead_of_read() -> None:
    env = {"STRATA_TASK": "ps:0", "TF_CONFIG": tf_config(PS_CLUSTER, "ps")}
    assert cluster.role(env) == "ps"
    assert strategy_name(env) == "parameter_server"


def test_tf_config_parse() -> None:
    config = parse_tf_config(tf_config(PS_CLUSTER, "worker", 1))
    assert (config.task_type, config.task_index) == ("worker", 1)
    assert config.address == "127.0.0.1:42002"
    assert config.training_tasks == 4


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not JSON"),
        ("[]", "JSON object"),
        (json.dumps({"cluster": PS_CLUSTER}), "TF_CONFIG.task"),
        (tf_config(PS_CLUSTER, "worker", 2), "only 2 worker"),
        (tf_config(PS_CLUSTER, "worker", -1), "non-negative"),
        (json.dumps({"cluster": {"worker": "127.0.0.1:1"}, "task": {"type": "worker"}}), "list"),
    ],
)
def test_bad_tf_config_is_rejected(raw: str, message: str) -> None:
    with pytest.raises(ClusterConfigError, match=message):
        parse_tf_config(raw)


def test_import_is_cheap_and_selects_tf_keras() -> None:
    """Importing the runtime must not import TensorFlow, but must pick tf_keras for later."""
    code = (
        "import os, sys; import agents.runtime; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; "
        "print(os.environ['TF_USE_LEGACY_KERAS'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "1"


@pytest.mark.slow  # imports TensorFlow
def test_mirrored_strategy_is_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_STRATEGY", "mirrored")
    monkeypatch.setenv("TF_CONFIG", tf_config({"chief": ["127.0.0.1:1"]}, "chief"))
    built = runtime.strategy()
    assert type(built).__name__ == "MirroredStrategy"
    assert built.num_replicas_in_sync >= 1
    assert runtime.strategy() is built


@pytest.mark.slow  # imports TensorFlow
def test_evaluator_gets_the_default_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorflow as tf

    monkeypatch.setenv("STRATA_STRATEGY", "parameter_server")
    monkeypatch.setenv("STRATA_TASK", "evaluator:0")
    assert runtime.strategy() is tf.distribute.get_strategy()


def test_callbacks_is_a_list_for_model_fit() -> None:
    assert runtime.callbacks() == []


def run_server(tf_config_value: str | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    if tf_config_value is not None:
        env["TF_CONFIG"] = tf_config_value
    return subprocess.Popen(
        [sys.executable, "-m", "agents.runtime.server"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "value",
    [None, "{bad", json.dumps({"task": {"type": "worker", "index": 0}})],
    ids=["missing", "not-json", "no-address"],
)
def test_server_rejects_a_config_it_cannot_serve(value: str | None) -> None:
    process = run_server(value)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "strata:" in stderr
    assert "Traceback" not in stderr


@pytest.mark.slow  # a TensorFlow server in a subprocess
def test_server_serves_until_sigterm_and_exits_zero() -> None:
    """The agent's contract for parameter-server workers: a ready line, then a quiet exit 0."""
    port = free_port()
    worker = "127.0.0.1:" + str(port)
    spec = {"chief": ["127.0.0.1:" + str(free_port())], "worker": [worker]}
    process = run_server(tf_config(spec, "worker"))
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the server is up (TF import: seconds)
        assert line.strip() == f"strata: serving worker:0 at {worker}"
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
        _, stderr = process.communicate()
        assert "Traceback" not in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# --- the spec's strategy options --------------------------------------------------------------


def test_strategy_options_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.runtime.strategy import strategy_options

    monkeypatch.delenv("STRATA_STRATEGY_OPTIONS", raising=False)
    assert strategy_options() == StrategyOptions()
    monkeypatch.setenv("STRATA_STRATEGY_OPTIONS", '{"partitioner": {"max_shards": 3}}')
    read = strategy_options()
    assert read.partitioner is not None and read.partitioner.max_shards == 3
    assert read.partitioner.min_shard_bytes == 256 << 10


def test_unreadable_strategy_options_are_ignored_with_a_word(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agents.runtime.strategy import strategy_options

    assert strategy_options('{"communication": "carrier-pigeon"}') == StrategyOptions()
    assert "ignoring STRATA_STRATEGY_OPTIONS" in capsys.readouterr().err


# Builds each multi-worker strategy for real, in its own process (one per process), on a
# cluster of in-process servers, with options from the environment as the server sets them.
BUILD_WITH_OPTIONS = """
import json, os, sys
import tensorflow as tf
from agents import runtime

kind, options, ports = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]
if kind == "parameter_server":
    cluster = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{ports[1]}"],
        "ps": [f"127.0.0.1:{ports[2]}"],
    }
    spec = tf.train.ClusterSpec(cluster)
    servers = [
        tf.distribute.Server(spec, job_name=role, task_index=0, protocol="grpc", start=True)
        for role in ("worker", "ps")
    ]
    task = {"type": "chief", "index": 0}
else:
    cluster = {"worker": [f"127.0.0.1:{ports[0]}"]}
    task = {"type": "worker", "index": 0}
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
os.environ["STRATA_STRATEGY"] = kind
os.environ["STRATA_STRATEGY_OPTIONS"] = options
strategy = runtime.strategy()
extended = strategy.extended
if kind == "parameter_server":
    partitioner = extended._variable_partitioner
    with strategy.scope():
        big = tf.Variable(tf.zeros([64, 1024]))  # 256 KiB
    shards = len(big.variables) if hasattr(big, "variables") else 1
    print("RESULT", partitioner._min_shard_bytes, partitioner._max_shards, shards, flush=True)
else:
    chosen = extended._communication_options
    print("RESULT", chosen.implementation.value, chosen.timeout_seconds, flush=True)
os._exit(0)
"""


@pytest.mark.slow  # imports TensorFlow, twice
@pytest.mark.parametrize(
    ("kind", "options", "expected"),
    [
        ("multi_worker_mirrored", '{"communication": "ring"}', "RING None"),
        ("multi_worker_mirrored", '{"collective_timeout": 90}', "AUTO 90.0"),
        ("multi_worker_mirrored", "", "AUTO None"),
        (
            "parameter_server",
            '{"partitioner": {"min_shard_bytes": 4096, "max_shards": 4}}',
            "4096 4 4",
        ),
        ("parameter_server", "", f"{256 << 10} 1 1"),
    ],
    ids=["mwm-ring", "mwm-timeout", "mwm-default", "ps-partitioner", "ps-default"],
)
def test_the_built_strategy_carries_the_spec_options(
    kind: str, options: str, expected: str
) -> None:
    ports = [str(free_port()) for _ in range(3)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "STRATA_"))}
    result = subprocess.run(
        [sys.executable, "-c", BUILD_WITH_OPTIONS, kind, options, *ports],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    assert lines[-1].removeprefix("RESULT ") == expected
