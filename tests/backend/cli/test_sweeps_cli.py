"""`strata sweep create|ls|show|stop` against a real server process (no agent: the trials'
jobs stay pending), and the trials table's columns and cells as a pure function."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from backend.cli.sweeps import TrialsTable, number_text, param_text, trials_table
from backend.sweeps.schemas import SweepRead
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.cli import run_strata
from tests.support.processes import strata_server

TOKENS = {"STRATA_API_TOKEN": ADMIN_TOKEN, "STRATA_AGENT_TOKEN": AGENT_TOKEN}
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "digits_sweep.yaml"


# --- the trials table, a pure function of GET /sweeps/{id} ------------------------------------


def sweep_read(trials: list[dict[str, Any]], **overrides: Any) -> SweepRead:
    spec = yaml.safe_load(EXAMPLE.read_text())
    now = datetime.now(UTC).isoformat()
    return SweepRead.model_validate(
        {
            "id": 1,
            "name": spec["name"],
            "status": "running",
            "reason": None,
            "project": "default",
            "submitted_by": "admin",
            "objective": "val_loss",
            "direction": "minimize",
            "resource": "epochs",
            "budget": 12,
            "parallel": 3,
            "counts": {},
            "best": None,
            "created_at": now,
            "finished_at": None,
            "spec": spec,
            "trials": [
                {
                    "job_status": "pending",
                    "value": None,
                    "curve": [],
                    "reason": None,
                    "created_at": now,
                    "finished_at": None,
                    **trial,
                }
                for trial in trials
            ],
            **overrides,
        }
    )


def test_the_trials_table_has_a_column_per_parameter_and_a_row_per_trial() -> None:
    sweep = sweep_read(
        [
            {
                "number": 1,
                "job_id": 8,
                "params": {"units": 16, "lr": 0.000123456},
                "status": "pruned",
                "curve": [[1, 0.9], [3, 0.71]],
                "reason": "pruned at epoch 3: ASHA rung 1",
            },
            {
                "number": 0,
                "job_id": 7,
                "params": {"lr": 0.0123456, "units": 128},
                "status": "succeeded",
                "value": 0.123456,
                "curve": [[1, 0.5], [3, 0.2], [9, 0.123456]],
            },
            {"number": 2, "job_id": 9, "params": {"lr": 0.05, "units": 8}, "status": "running"},
        ]
    )
    table = trials_table(sweep)
    # The parameters in the spec's order, the objective named by its metric, the resource.
    assert table.columns == [
        "TRIAL", "STATUS", "lr", "units", "val_loss", "EPOCH", "JOB", "REASON"
    ]  # fmt: skip
    # As the dashboard's table: a trial without a result shows its last intermediate value.
    assert table.rows == [
        ["0", "succeeded", "0.01235", "128", "0.1235", "9", "7", ""],
        ["1", "pruned", "1.235e-4", "16", "0.71", "3", "8", "pruned at epoch 3: ASHA rung 1"],
        ["2", "running", "0.05", "8", "-", "-", "9", ""],
    ]
    assert table.intermediate == [False, True, False]
    assert table.columns[TrialsTable.VALUE_COLUMN] == "val_loss"
    by_steps = trials_table(sweep_read([], resource="steps"))
    assert by_steps.columns[5] == "STEP" and by_steps.rows == []
    # A parameter a trial has beyond the spec's (a spec changed under it) gets a column too.
    extra = {"number": 0, "job_id": 1, "params": {"lr": 0.5, "units": 9, "depth": 2}}
    assert trials_table(sweep_read([{**extra, "status": "running"}])).columns[2:5] == [
        "lr",
        "units",
        "depth",
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    # What the dashboard's `metric` (frontend/src/ui/format.ts) writes for each, in JavaScript.
    [
        (None, "-"),
        (0.0, "0"),
        (-0.0, "0"),
        (3.0, "3"),
        (12.5, "12.5"),
        (0.1234567, "0.1235"),
        (9.99996, "10"),
        (99.996, "100"),
        (123.45, "123.5"),
        (100.25, "100.3"),  # halves away from zero, as toFixed rounds
        (150.0, "150"),
        (0.001, "0.001"),
        (0.000999, "9.99e-4"),
        (-0.0001234, "-1.23e-4"),
        (2.5e6, "2.50e+6"),
    ],
)
def test_numbers_are_written_as_the_dashboard_writes_them(value: float | None, text: str) -> None:
    assert number_text(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    # What the dashboard's `paramText` (frontend/src/data/sweeps.ts) writes for each.
    [
        (None, "-"),
        (64, "64"),
        (2.0, "2"),
        (True, "true"),
        (False, "false"),
        ("adam", "adam"),
        (0.25, "0.25"),
        (0.0123456, "0.01235"),
        (1234.56, "1235"),
        (12345.6, "12350"),
        (0.000123456, "1.235e-4"),
        (1e-5 + 1e-9, "1.000e-5"),
        (2500000.5, "2.500e+6"),
    ],
)
def test_parameter_values_are_written_as_the_dashboard_writes_them(value: Any, text: str) -> None:
    assert param_text(value) == text


# --- the commands against a server ----------------------------------------------------------


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with strata_server(tmp_path_factory.mktemp("sweeps-cli") / "data", TOKENS) as url:
        yield url


def strata(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_SERVER": url, "STRATA_TOKEN": ADMIN_TOKEN, "COLUMNS": "250"}
    return run_strata(args, env)


def get_sweep(url: str, sweep_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{url}/sweeps/{sweep_id}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def wait_for(url: str, sweep_id: str, ready: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        sweep = get_sweep(url, sweep_id)
        if ready(sweep):
            return sweep
        assert time.monotonic() < deadline, f"sweep {sweep_id} never got there: {sweep}"
        time.sleep(0.2)


def table_rows(text: str, first_column: str) -> list[list[str]]:
    """The header and rows of the table whose header begins with `first_column`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip("┃ ").startswith(first_column))
    rows = []
    for line in lines[start:]:
        if line.startswith(("┃", "│")):
            rows.append([cell.strip() for cell in line.strip("┃│").replace("┃", "│").split("│")])
        elif line.startswith("└"):
            break
    return rows


@pytest.mark.slow  # a server in a subprocess
def test_create_list_show_and_stop(server_url: str) -> None:
    created = strata("sweep", "create", str(EXAMPLE), url=server_url)
    assert created.returncode == 0, created.stderr
    first, hint = created.stdout.splitlines()
    assert first.startswith("sweep ") and "(digits-asha) created in project default" in first
    assert "running, 12 trials, 3 at a time" in first
    sweep_id = first.split()[1]
    assert f"strata sweep show {sweep_id}" in hint

    # The runner starts `parallel` trials; with no agent their jobs stay pending.
    wait_for(server_url, sweep_id, lambda s: len(s["trials"]) == 3)

    listed = strata("sweep", "ls", url=server_url)
    assert listed.returncode == 0, listed.stderr
    header, *rows = table_rows(listed.stdout, "ID")
    assert header == [
        "ID", "NAME", "STATUS", "PROJECT", "OBJECTIVE", "TRIALS", "RUNNING", "PRUNED", "FAILED",
        "BEST",
    ]  # fmt: skip
    row = next(r for r in rows if r[0] == sweep_id)
    assert row[1:] == [
        "digits-asha",
        "running",
        "default",
        "val_loss ↓",
        "0/12",
        "3",
        "0",
        "0",
        "-",
    ]
    only = strata("sweep", "ls", "--status", "succeeded", "--project", "default", url=server_url)
    assert only.returncode == 0 and sweep_id not in [
        r[0] for r in table_rows(only.stdout, "ID")[1:]
    ]

    shown = strata("sweep", "show", sweep_id, url=server_url)
    assert shown.returncode == 0, shown.stderr
    assert f"sweep {sweep_id} digits-asha" in shown.stdout
    assert "status: running" in shown.stdout
    assert "objective: val_loss ↓ (minimize)" in shown.stdout
    assert "tpe sampler (seed 7), early stopping asha by epochs" in shown.stdout
    assert "budget: 12 trials, 3 at a time, stops after 4 failed; 0 ended" in shown.stdout
    assert "best: none yet" in shown.stdout
    header, *rows = table_rows(shown.stdout, "TRIAL")
    assert header == ["TRIAL", "STATUS", "lr", "units", "val_loss", "EPOCH", "JOB", "REASON"]
    # The same rows and values as GET /sweeps/{id} (what the dashboard's table shows).
    trials = get_sweep(server_url, sweep_id)["trials"]
    assert len(rows) == len(trials) == 3
    for row, trial in zip(rows, sorted(trials, key=lambda t: t["number"]), strict=True):
        assert row[:2] == [str(trial["number"]), trial["status"]] == [row[0], "running"]
        assert float(row[2]) == pytest.approx(trial["params"]["lr"], rel=5e-3)
        assert 1e-4 <= float(row[2]) <= 0.3
        assert row[3] == str(trial["params"]["units"]) and 8 <= int(row[3]) <= 128
        assert row[4:] == ["-", "-", str(trial["job_id"]), ""]

    stopped = strata("sweep", "stop", sweep_id, "--reason", "enough for today", url=server_url)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"sweep {sweep_id} is stopping: enough for today"
    # The runner cancels the running trials, then the sweep is stopped.
    ended = wait_for(server_url, sweep_id, lambda s: s["status"] == "stopped")
    assert {t["status"] for t in ended["trials"]} == {"stopped"}
    after = strata("sweep", "show", sweep_id, url=server_url)
    assert "status: stopped — enough for today" in after.stdout
    assert "3 ended (0 succeeded, 0 pruned, 0 failed, 3 stopped)" in after.stdout
    assert "best: none" in after.stdout
    assert all(row[1] == "stopped" for row in table_rows(after.stdout, "TRIAL")[1:])

    again = strata("sweep", "stop", sweep_id, url=server_url)
    assert again.returncode == 1
    assert "error (409)" in again.stderr
    assert f"sweep {sweep_id} is stopped; only a running sweep can stop" in again.stderr


@pytest.mark.slow
def test_a_bad_spec_names_every_field(server_url: str, tmp_path: Path) -> None:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["parameters"]["lr"]["low"] = 1.0  # over its high
    spec["budget"]["trials"] = 0
    spec["objective"] = {"direction": "up"}
    spec["colour"] = "red"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec))
    result = strata("sweep", "create", str(bad), url=server_url)
    assert result.returncode == 1 and result.stdout == ""
    assert "error (422): the request was invalid" in result.stderr
    for line in (
        "parameters.lr: low must not exceed high, got low 1.0 and high 0.3",
        "objective.metric: this field is required",
        "objective.direction: Input should be 'minimize' or 'maximize'",
        "budget.trials: Input should be greater than or equal to 1",
        "colour: unknown field",
    ):
        assert f"  {line}" in result.stderr

    # The rules across fields, checked once each field is well formed; JSON too.
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["budget"]["parallel"] = 20
    spec["job"]["entrypoint"].append("${params.depth}")
    spec["job"]["name"] = "${params.lr}"
    as_json = tmp_path / "bad.json"
    as_json.write_text(json.dumps(spec))
    result = strata("sweep", "create", str(as_json), url=server_url)
    assert result.returncode == 1
    for line in (
        "job.name: parameters are written only into env values and entrypoint items",
        "job.entrypoint.12: ${params.depth} names no parameter; defined: lr, units",
        "budget.parallel: exceeds budget.trials (12)",
    ):
        assert f"  {line}" in result.stderr


@pytest.mark.slow
def test_an_unknown_sweep_is_a_clear_error(server_url: str) -> None:
    for args in (("show", "9999"), ("stop", "9999")):
        result = strata("sweep", *args, url=server_url)
        assert result.returncode == 1
        assert "error (404)" in result.stderr and "9999" in result.stderr


@pytest.mark.slow
def test_a_file_that_is_not_yaml_is_sent_as_it_is(server_url: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    result = strata("sweep", "create", str(broken), url=server_url)
    assert result.returncode == 1 and result.stdout == ""
    assert "error (422)" in result.stderr  # the server's own words about the document


@pytest.mark.slow
def test_the_job_code_dir_goes_with_the_sweep(server_url: str, tmp_path: Path) -> None:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["job"]["code"] = {"dir": "code"}
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hello')\n")
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = strata("sweep", "create", str(path), url=server_url)
    assert result.returncode == 0, result.stderr
    assert "code bundle " in result.stdout and "(1 files," in result.stdout
    sweep_id = result.stdout.splitlines()[-2].split()[1]
    sha256 = get_sweep(server_url, sweep_id)["spec"]["job"]["code"]["sha256"]
    assert len(sha256) == 64 and result.stdout.startswith(f"code bundle {sha256[:12]}")
    assert strata("sweep", "stop", sweep_id, url=server_url).returncode == 0

    elsewhere = strata("sweep", "create", str(EXAMPLE), "--project", "nowhere", url=server_url)
    assert elsewhere.returncode == 1 and "no project named nowhere" in elsewhere.stderr
