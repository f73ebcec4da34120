"""The Slurm backend's pure parts: the spec's slurm section, the allocation's shape, the
batch script, Slurm's states as Strata reasons, job agent tokens. No Slurm needed."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from pydantic import SecretStr

from backend.auth import TokenKind, TokenRegistry
from backend.config import Settings
from backend.errors import InvalidInput
from backend.jobs.slurm_options import ALLOWED_SBATCH_OPTIONS
from backend.jobs.spec import JobSpec, validate_spec
from backend.jobs.states import JobStatus
from backend.slurm.outcome import SlurmView, ending, waiting_reason
from backend.slurm.script import Shape, ShapeError, allocation_shape, batch_script, sbatch_options
from tests.support.factories import make_spec


def spec(slurm: dict[str, Any] | None = None, **replicas: dict[str, int]) -> JobSpec:
    document = make_spec("parameter_server", slurm=slurm if slurm is not None else {})
    if replicas:
        document["replicas"] = replicas
    return validate_spec(document)


def issues(slurm: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidInput) as raised:
        validate_spec(make_spec("parameter_server", slurm=slurm))
    return {issue.field: issue.message for issue in raised.value.issues}


def test_the_section_takes_where_the_job_runs() -> None:
    slurm = spec(
        {
            "partition": "gpu,gpu-long",
            "account": "ml-team",
            "qos": "high",
            "time_limit": "1-12:00:00",
            "constraint": "a100&ib",
            "sbatch_options": ["--exclusive", "--mail-type=END"],
        }
    ).slurm
    assert slurm is not None and slurm.partition == "gpu,gpu-long"


def test_options_outside_the_allow_list_are_refused_with_the_list() -> None:
    found = issues({"sbatch_options": ["--exclusive", "--gres=gpu:8"]})
    message = found["slurm.sbatch_options"]
    assert message.startswith("sbatch_options[1] '--gres=gpu:8' is not allowed; allowed")
    assert ", ".join(ALLOWED_SBATCH_OPTIONS) in message
    # What Strata decides stays Strata's, whatever the spelling.
    for option in ("--nodes=3", "--job-name=x", "-N 3", "--partition=gpu", "--output=/etc/x"):
        assert "slurm.sbatch_options" in issues({"sbatch_options": [option]}), option


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partition", "-p gpu"),
        ("account", "a b"),
        ("qos", ""),
        ("time_limit", "forever"),
        ("time_limit", "12:00:00:00"),
        ("constraint", "--x"),
        ("nodes", 0),
        ("unknown", "x"),
    ],
)
def test_malformed_fields_are_refused_at_their_path(field: str, value: object) -> None:
    assert f"slurm.{field}" in issues({field: value})


def test_the_allocation_has_a_node_per_gpu_task_and_the_gpus_they_need() -> None:
    ps = spec(chief={"count": 1}, worker={"count": 2, "gpus": 1}, ps={"count": 1})
    assert allocation_shape(ps) == Shape(nodes=2, gpus_per_node=1)
    cpu_only = spec(chief={"count": 1}, worker={"count": 2}, ps={"count": 1})
    assert allocation_shape(cpu_only) == Shape(nodes=1, gpus_per_node=0)
    # Asked for fewer nodes: the fewest GPUs per node that hold the tasks (2+1 | 2+1).
    packed = spec(
        {"nodes": 2},
        chief={"count": 1, "gpus": 2},
        worker={"count": 3, "gpus": 1},
        ps={"count": 1},
    )
    assert allocation_shape(packed) == Shape(nodes=2, gpus_per_node=3)


def test_a_shape_that_cannot_hold_the_tasks_says_so() -> None:
    too_big = spec(
        {"nodes": 1},
        chief={"count": 1},
        worker={"count": 5, "gpus": 16},
        ps={"count": 1},
    )
    with pytest.raises(ShapeError, match="5 tasks using 80 GPUs do not fit on 1 nodes"):
        allocation_shape(too_big)


def test_sbatch_options_carry_the_shape_the_defaults_and_the_specs_options_last() -> None:
    settings = Settings(slurm_partition="batch", slurm_account="default-acct")
    job = spec(
        {"qos": "high", "sbatch_options": ["--exclusive"]},
        chief={"count": 1},
        worker={"count": 2, "gpus": 1},
        ps={"count": 1},
    )
    options = sbatch_options(settings=settings, job_id=7, spec=job, name="strata-7", marker="m 1")
    assert options == [
        "--job-name=strata-7",
        "--comment=m 1",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--output=/dev/null",
        "--requeue",
        "--gres=gpu:1",
        "--partition=batch",
        "--account=default-acct",
        "--qos=high",
        "--exclusive",
    ]


def test_the_batch_script_starts_one_agent_per_node_and_holds_no_secret() -> None:
    settings = Settings(slurm_agent_command="/opt/strata/bin/strata agent --log-level debug")
    script = batch_script(settings=settings, job_id=12, server_url="https://strata:8443")
    last = script.strip().splitlines()[-1]
    assert shlex.split(last) == [
        "exec",
        "srun",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "sh",
        "-c",
        'if command -v nvidia-smi >/dev/null; then exec "$@" --name "strata-12-$SLURMD_NODENAME";'
        ' fi; exec "$@" --name "strata-12-$SLURMD_NODENAME" --gpus "${SLURM_GPUS_ON_NODE:-0}"',
        "sh",
        "/opt/strata/bin/strata",
        "agent",
        "--log-level",
        "debug",
        "--server",
        "https://strata:8443",
        "--notice",
        "0",
    ]
    assert "sa." not in script and "STRATA_AGENT_TOKEN=" not in script


@pytest.mark.parametrize(
    ("view", "reason"),
    [
        (SlurmView("5", "PENDING", "Resources"), "Slurm: Resources"),
        (SlurmView("5", "PENDING", "QOSMaxGRESPerUser"), "Slurm: QOSMaxGRESPerUser"),
        (SlurmView("5", "PENDING", "None"), "Slurm: queued"),
        (
            SlurmView("5", "RUNNING", "None", "n[1-2]"),
            "Slurm: running on n[1-2], waiting for its agents",
        ),
    ],
)
def test_a_waiting_job_shows_slurms_reason(view: SlurmView, reason: str) -> None:
    assert waiting_reason(view) == reason


@pytest.mark.parametrize(
    ("view", "status", "reason"),
    [
        (
            SlurmView("5", "CANCELLED", "by 0"),
            JobStatus.cancelled,
            "Slurm job 5 was cancelled outside Strata (CANCELLED, by 0)",
        ),
        (
            SlurmView("5", "TIMEOUT"),
            JobStatus.failed,
            "Slurm job 5 reached its time limit (TIMEOUT)",
        ),
        (SlurmView("5", "NODE_FAIL"), JobStatus.failed, "a node of Slurm job 5 failed (NODE_FAIL)"),
        (
            SlurmView("5", "FAILED", "", "", "1:0"),
            JobStatus.failed,
            "Slurm job 5 ended FAILED, exit code 1:0",
        ),
        (SlurmView("5", None), JobStatus.failed, "Slurm job 5 is no longer known to Slurm"),
    ],
)
def test_a_slurm_job_that_ended_ends_the_job_with_its_reason(
    view: SlurmView, status: JobStatus, reason: str
) -> None:
    end = ending(view)
    assert (end.status, end.reason) == (status, reason)


def test_job_agent_tokens_name_one_job_and_are_no_other_kind_of_token() -> None:
    tokens = TokenRegistry({TokenKind.admin: SecretStr("admin-secret")})
    token = tokens.job_agent_token(12)
    principal = tokens.identify(token)
    assert principal is not None
    assert (principal.kind, principal.job_id) == (TokenKind.job_agent, 12)
    assert principal.label == "job agent token of job 12"
    assert tokens.identify(token.replace("sa.12.", "sa.13.")) is None
    assert tokens.identify(token.replace("sa.", "st.")) is None  # not a task token either
    assert tokens.job_agent_token(12) != tokens.task_token(12).replace("st.", "sa.")
    other = TokenRegistry({TokenKind.admin: SecretStr("rotated")})
    assert other.identify(token) is None
