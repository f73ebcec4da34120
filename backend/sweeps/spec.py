"""The sweep spec: a job spec with parameters written into it, the space they are drawn from,
the objective, the budget, the sampler and the early stopping. Validated as job specs are:
strict, closed, and every problem named by its dotted path (``job.replicas.ps.count``,
``parameters.lr.low``)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agents.protocol import METRIC_NAME_PATTERN
from backend.errors import FieldIssue, InvalidInput
from backend.jobs.spec import JobSpec, safe_name, validate_spec
from backend.sweeps.params import PARAM_NAME_PATTERN, filled_in, references

MAX_PARAMETERS = 32
MAX_TRIALS = 10_000
MAX_PARALLEL = 256
MAX_CHOICES = 256
MAX_GRID_POINTS = 100_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Number = float | int


class FloatRange(_Strict):
    type: Literal["float"]
    low: Number
    high: Number
    log: bool = Field(default=False, description="Drawn uniformly in log space; low > 0.")
    step: Annotated[Number, Field(gt=0)] | None = Field(
        default=None, description="Values low, low+step, ...; needed by the grid sampler."
    )

    @model_validator(mode="after")
    def _bounds(self) -> FloatRange:
        _check_bounds(self.low, self.high, self.log, self.step)
        return self


class IntRange(_Strict):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _bounds(self) -> IntRange:
        _check_bounds(self.low, self.high, self.log, None if self.step == 1 else self.step)
        return self


Choice = str | int | float | bool


class Categorical(_Strict):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES)

    @model_validator(mode="after")
    def _distinct(self) -> Categorical:
        if len({repr(choice) for choice in self.choices}) != len(self.choices):
            raise ValueError("choices must be distinct")
        return self


def _check_bounds(low: float, high: float, log: bool, step: float | None) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("low and high must be finite numbers")
    if low > high:
        raise ValueError(f"low must not exceed high, got low {low} and high {high}")
    if log and low <= 0:
        raise ValueError(f"a log scale needs low > 0, got {low}")
    if log and step is not None:
        raise ValueError("a log scale takes no step")


Parameter = Annotated[FloatRange | IntRange | Categorical, Field(discriminator="type")]


class Objective(_Strict):
    metric: str = Field(
        pattern=METRIC_NAME_PATTERN,
        description="A metric the trial's job streams, e.g. val_loss or eval/accuracy; its last "
        "value is the trial's result, the values before it are reported to the early stopping.",
    )
    direction: Literal["minimize", "maximize"] = "minimize"


class Budget(_Strict):
    trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)] = Field(description="Trials in all.")
    parallel: Annotated[int, Field(ge=1, le=MAX_PARALLEL)] = Field(
        default=1, description="Trials running at once."
    )
    max_failed: Annotated[int, Field(ge=0, le=MAX_TRIALS)] | None = Field(
        default=None,
        description="Failed trials the sweep outlives; one more and it stops (null: as many "
        "as its trials: failures never stop it).",
    )
    wall_time: Annotated[float, Field(gt=0, le=90 * 86400)] | None = Field(
        default=None,
        description="Seconds from the sweep's start; then running trials are cancelled and it "
        "ends with what it found.",
    )


class Sampler(_Strict):
    type: Literal["random", "tpe", "grid"] = "tpe"
    seed: int | None = Field(default=None, description="For repeatable draws.")


class EarlyStopping(_Strict):
    type: Literal["none", "median", "asha", "hyperband"] = "none"
    resource: Literal["epochs", "steps"] = Field(
        default="epochs", description="What the objective's intermediate values are counted in."
    )
    min_resource: Annotated[int, Field(ge=1)] = Field(
        default=1,
        description="asha and hyperband: the first rung; median: warm-up before "
        "any trial is stopped.",
    )
    max_resource: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="asha and hyperband: a full trial's resource (required by hyperband); a "
        "trial that reaches it is not judged there, it ran to its end.",
    )
    reduction_factor: Annotated[int, Field(ge=2, le=64)] = Field(
        default=3, description="asha and hyperband: 1 in this many trials goes on at each rung."
    )
    startup_trials: Annotated[int, Field(ge=0)] = Field(
        default=3, description="median: trials that finish before any is stopped."
    )


class SweepSpec(_Strict):
    """A hyperparameter search: trials of `job`, each with its parameters written in."""

    name: str = Field(description="Short and safe: letters, digits, '.', '_' and '-'.")
    job: dict[str, Any] = Field(
        description="A job spec; ${params.NAME} in its env values and entrypoint items is "
        "replaced by each trial's value."
    )
    parameters: dict[str, Parameter] = Field(min_length=1, max_length=MAX_PARAMETERS)
    objective: Objective
    budget: Budget
    sampler: Sampler = Sampler()
    early_stopping: EarlyStopping = EarlyStopping()

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return safe_name(value)

    def job_for(self, params: dict[str, Any]) -> JobSpec:
        """The trial's job spec: the template with `params` written in, validated."""
        return validate_spec(filled_in(self.job, params))

    @property
    def project(self) -> str | None:
        project = self.job.get("project")
        return project if isinstance(project, str) else None


def validate_sweep_spec(data: object) -> SweepSpec:
    """Validate a parsed document, raising InvalidInput with every problem found."""
    if not isinstance(data, dict):
        raise InvalidInput(
            [FieldIssue("", f"a sweep spec must be a mapping of fields, got {type(data).__name__}")]
        )
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput([_issue(err) for err in exc.errors()]) from None
    issues = _parameter_issues(spec) + _search_issues(spec)
    if not issues:
        try:
            spec.job_for(first_values(spec))
        except InvalidInput as invalid:
            issues = [FieldIssue(_under("job", i.field), i.message) for i in invalid.issues]
    if issues:
        raise InvalidInput(issues)
    return spec


def _parameter_issues(spec: SweepSpec) -> list[FieldIssue]:
    issues = [
        FieldIssue(f"parameters.{name}", "a parameter name is letters, digits and '_'")
        for name in spec.parameters
        if not PARAM_NAME_PATTERN.fullmatch(name)
    ]
    used = references(spec.job)
    for name, where in used:
        if not name:
            issues.append(
                FieldIssue(
                    where, "parameters are written only into env values and entrypoint items"
                )
            )
        elif name not in spec.parameters:
            defined = ", ".join(sorted(spec.parameters))
            issues.append(
                FieldIssue(where, f"${{params.{name}}} names no parameter; defined: {defined}")
            )
    named = {name for name, _ in used}
    issues += [
        FieldIssue(
            f"parameters.{name}",
            f"is never used: write ${{params.{name}}} into the job's env or entrypoint",
        )
        for name in spec.parameters
        if name not in named
    ]
    return issues


def _search_issues(spec: SweepSpec) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    budget, stopping = spec.budget, spec.early_stopping
    if budget.parallel > budget.trials:
        issues.append(FieldIssue("budget.parallel", f"exceeds budget.trials ({budget.trials})"))
    if spec.sampler.type == "grid":
        stepless = [
            name
            for name, parameter in spec.parameters.items()
            if isinstance(parameter, FloatRange) and parameter.step is None
        ]
        issues += [
            FieldIssue(
                f"parameters.{name}",
                "the grid sampler needs a step for a float range (or categorical choices)",
            )
            for name in stepless
        ]
        points = math.prod(grid_size(p) for p in spec.parameters.values())
        if not stepless and points > MAX_GRID_POINTS:
            issues.append(
                FieldIssue("parameters", f"the grid has more than {MAX_GRID_POINTS} points")
            )
        elif not stepless and budget.trials > points:
            issues.append(
                FieldIssue(
                    "budget.trials",
                    f"the grid has {points} points: more trials would repeat some of them",
                )
            )
    if stopping.type == "hyperband" and stopping.max_resource is None:
        issues.append(
            FieldIssue("early_stopping.max_resource", "hyperband needs a full trial's resource")
        )
    if stopping.max_resource is not None and stopping.type not in ("asha", "hyperband"):
        issues.append(
            FieldIssue(
                "early_stopping.max_resource",
                f"only asha and hyperband take a max_resource; this is {stopping.type}",
            )
        )
    elif stopping.max_resource is not None and stopping.max_resource < stopping.min_resource:
        issues.append(FieldIssue("early_stopping.max_resource", "must be at least min_resource"))
    return issues


def grid_size(parameter: FloatRange | IntRange | Categorical) -> int:
    """How many values a grid sampler visits for the parameter (counted, not listed: a range
    may hold more than memory does)."""
    if isinstance(parameter, Categorical):
        return len(parameter.choices)
    span = (parameter.high - parameter.low) / (parameter.step or 1)
    if not math.isfinite(span) or span >= MAX_GRID_POINTS:
        return MAX_GRID_POINTS + 1  # too many, however many
    return math.floor(span + 1e-9) + 1


def grid_values(parameter: FloatRange | IntRange | Categorical) -> list[Choice]:
    """Every value a grid sampler visits for the parameter (of a grid already checked to be
    at most MAX_GRID_POINTS in all)."""
    if isinstance(parameter, Categorical):
        return list(parameter.choices)
    step = parameter.step or 1
    return [parameter.low + i * step for i in range(grid_size(parameter))]


def first_values(spec: SweepSpec) -> dict[str, Any]:
    """One point of the space (the lows, the first choices) to check the job spec with."""
    return {
        name: p.choices[0] if isinstance(p, Categorical) else p.low
        for name, p in spec.parameters.items()
    }


def _under(prefix: str, field: str) -> str:
    return f"{prefix}.{field}" if field else prefix


def _issue(err: Any) -> FieldIssue:
    loc = [part for part in err["loc"] if part not in ("float", "int", "categorical")]
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    elif err["type"] == "missing":
        message = "this field is required"
    return FieldIssue(".".join(str(part) for part in loc), message)
