"""Properties of the job spec validator (backend/jobs/spec.py), checked with hypothesis.

* Whatever document arrives, the validator answers with a JobSpec or with its own
  InvalidInput (one issue per field, each naming it), never with another exception: the
  router turns InvalidInput into a 422, anything else would be a 500.
* Every valid spec survives a round trip: dump, serialize (JSON, YAML), parse, validate.
* working_dir and checkpoint.dir are accepted only when they stay relative and inside their
  root: '..', absolute paths, NUL and control characters and backslashes are refused with a
  message naming the field.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.errors import InvalidInput, UnsupportedMediaType
from backend.jobs.spec import (
    MAX_PATH_CHARS,
    JobSpec,
    parse_spec_document,
    strategy_issues,
    validate_spec,
)
from tests.support.factories import make_spec

SETTINGS = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "name",
    "strategy",
    "entrypoint",
    "working_dir",
    "env",
    "replicas",
    "checkpoint",
    "restart",
    "priority",
]


def _answer(document: object) -> JobSpec | InvalidInput:
    """The validator's answer; any exception but InvalidInput fails the calling test."""
    try:
        return validate_spec(document)
    except InvalidInput as exc:
        assert exc.issues, "an InvalidInput must list at least one issue"
        for issue in exc.issues:
            assert isinstance(issue.field, str) and issue.message.strip()
        json.dumps({"errors": [[i.field, i.message] for i in exc.issues]})  # a 422 body can hold it
        return exc


@SETTINGS
@given(document=json_values)
def test_any_document_gets_a_spec_or_the_validators_own_error(document: object) -> None:
    _answer(document)


@SETTINGS
@given(
    base=st.sampled_from(["parameter_server", "multi_worker_mirrored", "mirrored"]),
    field=st.sampled_from([*FIELDS, "surplus"]),
    value=json_values,
)
def test_a_valid_spec_with_one_field_replaced_by_anything(
    base: str, field: str, value: object
) -> None:
    document = make_spec(base, **{field: value})
    answer = _answer(document)
    if field == "surplus":
        assert isinstance(answer, InvalidInput)
        assert [issue.field for issue in answer.issues] == ["surplus"]
        assert "unknown field; expected one of: name, strategy" in answer.issues[0].message
    elif isinstance(answer, InvalidInput):
        # Every issue is about the field that was replaced (or the strategy rules it affects).
        assert all(issue.field.split(".")[0] in (field, "replicas") for issue in answer.issues), (
            answer.issues
        )


@SETTINGS
@given(
    body=st.binary(max_size=200),
    content_type=st.sampled_from(
        [
            None,
            "application/json",
            "application/yaml",
            "text/plain",
            "application/x-yaml; charset=utf-8",
        ]
    ),
)
def test_any_body_parses_or_is_refused_clearly(body: bytes, content_type: str | None) -> None:
    try:
        document = parse_spec_document(body, content_type)
    except UnsupportedMediaType as exc:
        assert content_type == "text/plain" and "application/json" in exc.message
        return
    except InvalidInput as exc:
        assert exc.issues[0].field == "" and "the body is not valid" in exc.issues[0].message
        return
    _answer(document)


def test_lone_surrogates_are_refused_naming_the_field() -> None:
    # JSON can carry them ("\ud800"); no database, argv or file name can.
    document = json.loads('{"entrypoint": ["python", "\\ud800"], "env": {"A": "\\udfff"}}')
    answer = _answer(make_spec("mirrored", **document))
    assert isinstance(answer, InvalidInput)
    assert {issue.field for issue in answer.issues} == {"entrypoint.1", "env.A"}
    assert all("lone surrogate" in issue.message for issue in answer.issues)


# --- valid specs round-trip -------------------------------------------------------------

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", fullmatch=True)
path_parts = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda part: part not in (".", ".."))
relative_paths = st.lists(path_parts, min_size=1, max_size=4).map("/".join)
args = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=30)
env = st.dictionaries(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True).filter(
        lambda key: (
            not key.startswith("STRATA_")
            and key not in ("TF_CONFIG", "GRPC_FAIL_FAST")
            and key != "CUDA_VISIBLE_DEVICES"
        )
    ),
    args,
    max_size=4,
)
counts = st.integers(min_value=0, max_value=8)


@st.composite
def replicas(draw: st.DrawFn, strategy: str) -> dict[str, Any]:
    gpus = st.integers(min_value=0, max_value=16)
    if strategy == "parameter_server":
        shape = {
            "chief": 1,
            "worker": draw(st.integers(1, 8)),
            "ps": draw(st.integers(1, 4)),
        }
    elif strategy == "multi_worker_mirrored":
        shape = {"chief": draw(st.integers(0, 1)), "worker": draw(st.integers(1, 8)), "ps": 0}
    else:
        chief = draw(st.integers(0, 1))
        shape = {"chief": chief, "worker": 1 - chief, "ps": 0}
    shape["evaluator"] = draw(st.integers(0, 1))
    return {role: {"count": count, "gpus": draw(gpus)} for role, count in shape.items()}


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    strategy = draw(st.sampled_from(["parameter_server", "multi_worker_mirrored", "mirrored"]))
    spec: dict[str, Any] = {
        "name": draw(names),
        "strategy": strategy,
        "entrypoint": [draw(args.filter(str.strip)), *draw(st.lists(args, max_size=4))],
        "replicas": draw(replicas(strategy)),
    }
    optional: dict[str, Any] = {
        "working_dir": relative_paths | st.just("."),
        "env": env,
        "checkpoint": st.fixed_dictionaries(
            {},
            optional={
                "dir": st.none() | relative_paths,
                "every_epochs": st.none() | st.integers(1, 1_000_000),
                "every_seconds": st.none()
                | st.floats(min_value=0.001, max_value=86_400 * 7, allow_nan=False),
                "keep": st.integers(1, 1000),
                "keep_best": st.fixed_dictionaries(
                    {"metric": st.sampled_from(["loss", "val_accuracy", "eval/auc"])},
                    optional={"mode": st.sampled_from(["min", "max"])},
                ),
            },
        ),
        "restart": st.fixed_dictionaries(
            {},
            optional={
                "policy": st.sampled_from(["never", "on_failure", "exit_code"]),
                "max_restarts": st.integers(0, 100),
                "backoff_seconds": st.floats(min_value=0, max_value=3600, allow_nan=False),
            },
        ),
        "priority": st.integers(-100, 100),
    }
    for key, strategy_of in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(strategy_of)
    return spec


@SETTINGS
@given(document=valid_specs())
def test_valid_specs_round_trip(document: dict[str, Any]) -> None:
    spec = validate_spec(document)
    assert strategy_issues(spec) == []
    dumped = spec.model_dump(mode="json")
    assert validate_spec(dumped) == spec
    # What the server stores is what it reads back, through either wire format.
    assert validate_spec(parse_spec_document(json.dumps(dumped).encode(), None)) == spec
    as_yaml = yaml.safe_dump(dumped, allow_unicode=True).encode()
    assert validate_spec(parse_spec_document(as_yaml, "application/yaml")) == spec
    # The fields that were given keep their values.
    for key in ("name", "strategy", "entrypoint", "working_dir", "env", "priority"):
        if key in document:
            assert dumped[key] == document[key]


# --- confined paths ---------------------------------------------------------------------

segments = st.sampled_from(["..", ".", "", "a", "b c", "日本", "\\", "..\\..", "~", "x\x00y", "\n"])
hostile_paths = st.one_of(
    st.lists(segments | path_parts, max_size=6).map("/".join),
    st.lists(segments | path_parts, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)),
    st.text(max_size=40),
)


def _stays_inside(value: str) -> bool:
    """An oracle apart from the validator: joined to a root and normalized, is it still
    under the root, with no byte that a file name cannot or should not hold?"""
    root = "/srv/root"
    joined = posixpath.normpath(posixpath.join(root, value))
    return (
        (joined == root or joined.startswith(root + "/"))
        and not value.startswith("/")
        and "\x00" not in value
        and "\\" not in value
        and ".." not in value.split("/")
    )


def _check_path(field: str, value: str) -> None:
    if field == "working_dir":
        document = make_spec("mirrored", working_dir=value)
    else:
        document = make_spec("mirrored", checkpoint={"dir": value})
    answer = _answer(document)
    if isinstance(answer, JobSpec):
        assert _stays_inside(value), f"{field}={value!r} was accepted"
        assert len(value) <= MAX_PATH_CHARS
        assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)
        return
    assert [issue.field for issue in answer.issues] == [field], answer.issues
    message = answer.issues[0].message
    assert message.startswith(f"{field} must"), message
    if "\x00" in value:
        assert "NUL" in message
    elif value.startswith("/") and _stays_inside(value.lstrip("/")) and value.isprintable():
        assert "must be relative to" in message and repr(value) in message


@SETTINGS
@given(value=hostile_paths, field=st.sampled_from(["working_dir", "checkpoint.dir"]))
def test_paths_are_accepted_only_inside_their_root(value: str, field: str) -> None:
    _check_path(field, value)


@SETTINGS
@given(value=relative_paths, field=st.sampled_from(["working_dir", "checkpoint.dir"]))
def test_plain_relative_paths_are_accepted(value: str, field: str) -> None:
    # Unicode, spaces, '~' and dots inside names are all fine: they stay inside.
    _check_path(field, value)
    spec = validate_spec(make_spec("mirrored", working_dir=value, checkpoint={"dir": value}))
    assert spec.working_dir == value and spec.checkpoint.dir == value


def test_each_escape_is_refused_with_what_was_expected() -> None:
    cases = {
        "/etc": "working_dir must be relative to the agent's workspace, got '/etc'",
        "../up": "working_dir must stay inside the agent's workspace: no '..' parts",
        "a/../../b": "no '..' parts",
        "a\x00b": "working_dir must not contain NUL bytes",
        "..\\..\\etc": "working_dir must use '/' as its separator",
        "a\nb": "working_dir must not contain control characters",
        "a" * (MAX_PATH_CHARS + 1): f"at most {MAX_PATH_CHARS} characters",
    }
    for value, words in cases.items():
        answer = _answer(make_spec("mirrored", working_dir=value))
        assert isinstance(answer, InvalidInput) and words in answer.issues[0].message, value
    for value in (".", "", "./"):
        answer = _answer(make_spec("mirrored", checkpoint={"dir": value}))
        assert isinstance(answer, InvalidInput)
        assert answer.issues[0].field == "checkpoint.dir"
        assert "must name a directory under the checkpoint root" in answer.issues[0].message
    answer = _answer(make_spec("mirrored", checkpoint={"dir": "/mnt/shared"}))
    assert isinstance(answer, InvalidInput)
    assert answer.issues[0].message == (
        "checkpoint.dir must be relative to the checkpoint root, got '/mnt/shared'"
    )
