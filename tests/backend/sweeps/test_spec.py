"""The sweep spec: every bad field named by its dotted path; parameters written in."""

from __future__ import annotations

from typing import Any

import pytest

from backend.errors import InvalidInput
from backend.sweeps.params import filled_in
from backend.sweeps.spec import validate_sweep_spec
from tests.support.factories import make_sweep_spec


def issues(doc: Any) -> dict[str, str]:
    with pytest.raises(InvalidInput) as raised:
        validate_sweep_spec(doc)
    return {issue.field: issue.message for issue in raised.value.issues}


def test_the_example_is_valid_and_its_trials_get_their_values() -> None:
    spec = validate_sweep_spec(make_sweep_spec())
    job = spec.job_for({"lr": 0.00123, "units": 32})
    assert job.entrypoint == ["python", "train.py", "--lr", "0.00123"]
    assert job.env["UNITS"] == "32"


def test_values_are_written_as_json_writes_them_and_strings_as_they_are() -> None:
    job: dict[str, Any] = {
        "entrypoint": ["a=${params.a}", "b=${params.b}", "${params.c}"],
        "env": {"C": "x"},
    }
    filled = filled_in(job, {"a": True, "b": 1e-05, "c": "adam"})
    assert filled["entrypoint"] == ["a=true", "b=1e-05", "adam"]
    assert job["entrypoint"][0] == "a=${params.a}"  # the template is left as it was


def test_fields_are_named() -> None:
    doc = make_sweep_spec()
    doc["parameters"]["units"] = {"type": "int", "low": 5, "high": 2}
    doc["parameters"]["lr"] = {"type": "float", "low": 0, "high": 1, "log": True}
    doc["objective"] = {"metric": "val loss", "direction": "up"}
    doc["sampler"] = {"type": "bayes"}
    doc["budget"] = {"trials": 0}
    doc["extra"] = 1
    found = issues(doc)
    assert set(found) == {
        "parameters.units",
        "parameters.lr",
        "objective.metric",
        "objective.direction",
        "sampler.type",
        "budget.trials",
        "extra",
    }
    assert found["parameters.units"] == "low must not exceed high, got low 5 and high 2"
    assert found["parameters.lr"] == "a log scale needs low > 0, got 0"
    assert found["extra"] == "unknown field"


def test_references_must_match_parameters_and_be_in_env_or_entrypoint() -> None:
    doc = make_sweep_spec()
    doc["job"]["env"] = {"UNITS": "${params.width}"}
    doc["job"]["name"] = "trial-${params.lr}"
    found = issues(doc)
    assert found["job.env.UNITS"] == "${params.width} names no parameter; defined: lr, units"
    assert found["job.name"] == "parameters are written only into env values and entrypoint items"
    assert found["parameters.units"].startswith("is never used")


def test_the_job_spec_is_checked_with_the_values_written_in() -> None:
    doc = make_sweep_spec()
    doc["job"]["replicas"] = {"chief": {"count": 1}, "ps": {"count": 1}}
    assert issues(doc) == {"job.replicas.ps.count": "mirrored takes no ps"}
    doc = make_sweep_spec()
    doc["job"]["strategy"] = "pipeline"
    assert set(issues(doc)) == {"job.strategy"}


def test_search_rules() -> None:
    doc = make_sweep_spec(
        sampler={"type": "grid"},
        early_stopping={"type": "hyperband", "min_resource": 3},
        budget={"trials": 2, "parallel": 3},
    )
    found = issues(doc)
    assert found == {
        "parameters.lr": "the grid sampler needs a step for a float range (or categorical choices)",
        "early_stopping.max_resource": "hyperband needs a full trial's resource",
        "budget.parallel": "exceeds budget.trials (2)",
    }
    doc["parameters"]["lr"] = {"type": "float", "low": 0.1, "high": 0.3, "step": 0.1}
    doc["early_stopping"]["max_resource"] = 9
    doc["budget"] = {"trials": 6, "parallel": 2}
    spec = validate_sweep_spec(doc)
    assert spec.sampler.type == "grid"


def test_a_spec_must_be_a_mapping() -> None:
    assert issues([1]) == {"": "a sweep spec must be a mapping of fields, got list"}


def test_a_name_is_safe_whole() -> None:
    assert set(issues(make_sweep_spec(name="a/b"))) == {"name"}
    assert set(issues(make_sweep_spec(name="x" * 64))) == {"name"}


def test_a_grid_is_not_visited_twice_and_max_resource_is_hyperbands() -> None:
    doc = make_sweep_spec(sampler={"type": "grid"}, budget={"trials": 7, "parallel": 1})
    doc["parameters"]["lr"] = {"type": "float", "low": 0.1, "high": 0.2, "step": 0.1}
    assert issues(doc) == {
        "budget.trials": "the grid has 6 points: more trials would repeat some of them"
    }
    doc = make_sweep_spec(early_stopping={"type": "median", "max_resource": 9})
    assert issues(doc) == {
        "early_stopping.max_resource": "only asha and hyperband take a max_resource; this is median"
    }


def test_a_huge_grid_is_refused_without_listing_it() -> None:
    doc = make_sweep_spec(sampler={"type": "grid"}, budget={"trials": 2, "parallel": 1})
    doc["parameters"]["lr"] = {"type": "float", "low": 0.0, "high": 1e300, "step": 1e-300}
    doc["parameters"]["units"] = {"type": "int", "low": 0, "high": 2**62}
    found = issues(doc)
    assert list(found) == ["parameters"]
    assert found["parameters"] == "the grid has more than 100000 points"
