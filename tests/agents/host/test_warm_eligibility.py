"""When a start can be warm: the job's entrypoint and wishes, the variables read before
TensorFlow loads, and the modules a task's own directory would shadow."""

from __future__ import annotations

from pathlib import Path

from agents.host.warm_eligibility import (
    Entry,
    import_time_differences,
    python_entry,
    read_at_import,
    shadowed,
    task_refusal,
    warm_env,
    warm_start_refusal,
)
from agents.protocol import StartTask, TaskKey
from agents.runtime_environment import RuntimeEnvironment

KEY = TaskKey(job_id=3, task="worker:0", attempt=0)


def start(*argv: str, **fields: object) -> StartTask:
    env = {"TF_USE_LEGACY_KERAS": "1"}  # as the server sends it
    return StartTask(key=KEY, argv=list(argv), working_dir=".", env=env, port=1, gpus=[], **fields)


def test_only_python_scripts_and_modules_can_start_warm() -> None:
    assert python_entry(["python", "t.py", "-x"]) == Entry("script", "t.py", ["-x"])
    assert python_entry(["python3", "-m", "a.b", "1"]) == Entry("module", "a.b", ["1"])
    for argv in (["python"], ["python", "-u", "t.py"], ["python", "-c", "x"], ["/bin/sh", "x"]):
        assert python_entry(argv) is None, argv
    assert python_entry(["python", "-m", "not-a-name"]) is None


def test_the_reasons_a_start_goes_cold_whatever_the_pool_holds() -> None:
    assert warm_start_refusal(start("python", "t.py")) is None
    cold = start("python", "t.py", warm_start=False)
    assert "warm_start: false" in (warm_start_refusal(cold) or "")
    image = RuntimeEnvironment(image="tensorflow/tensorflow:2.21.0")
    assert "environment" in (warm_start_refusal(start("python", "t.py", environment=image)) or "")
    assert "entrypoint" in (warm_start_refusal(start("bash", "run.sh")) or "")
    assert "memory limit" in (warm_start_refusal(start("python", "t.py", memory_limit=2**30)) or "")


def test_variables_read_before_tensorflow_loads_must_match_the_warm_process() -> None:
    for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS", "XLA_FLAGS", "CUDA_HOME"):
        assert read_at_import(name), name
    for name in ("CUDA_VISIBLE_DEVICES", "TF_CONFIG", "GRPC_FAIL_FAST", "DIGITS_BATCH"):
        assert not read_at_import(name), name
    warm = warm_env({"PATH": "/bin", "STRATA_AGENT_TOKEN": "secret"})
    assert "STRATA_AGENT_TOKEN" not in warm and warm["TF_USE_LEGACY_KERAS"] == "1"
    task = {**warm, "TF_CONFIG": "{}", "CUDA_VISIBLE_DEVICES": "1", "MINE": "x"}
    assert import_time_differences(task, warm) == []
    task.update(TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="0")
    assert import_time_differences(task, warm) == ["TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS"]


def test_a_module_in_the_tasks_directory_that_shadows_an_imported_one(tmp_path: Path) -> None:
    (tmp_path / "numpy.py").write_text("")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("")
    (tmp_path / "notes").mkdir()  # a namespace package loses to the real one: no shadow
    modules: dict[str, str | None] = {"numpy": "/site", "agents": str(tmp_path), "notes": "/x"}
    assert shadowed(modules, tmp_path) == ["numpy"]


def test_a_task_starts_cold_where_the_warm_processes_were_started_otherwise(
    tmp_path: Path,
) -> None:
    warm = warm_env({"PATH": "/bin"})
    (tmp_path / "train.py").write_text("")
    modules: dict[str, str | None] = {"numpy": "/site"}
    assert task_refusal(["python", "train.py"], tmp_path, warm, warm, modules) is None
    assert task_refusal(["python", "-m", "train"], tmp_path, warm, warm, modules) is None
    differs = task_refusal(["python", "train.py"], tmp_path, {**warm, "LC_ALL": "C"}, warm, {})
    assert differs == "the job sets LC_ALL, read before TensorFlow loads"
    missing = task_refusal(["python", "gone.py"], tmp_path, warm, warm, modules)
    assert missing == "gone.py is not a file (Python says why)"
    (tmp_path / "numpy.py").write_text("")
    hidden = task_refusal(["python", "-m", "train"], tmp_path, warm, warm, modules)
    assert hidden == f"{tmp_path} has numpy, which a warm process imported from elsewhere"
    # Before any warm process has said what it imported, nothing counts as shadowed.
    assert task_refusal(["python", "train.py"], tmp_path, warm, warm, {}) is None
