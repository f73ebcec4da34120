"""The names a job's parts go by, defined once: roles, strategies and task names.

The server, the agent and the runtime all import these (this package imports nothing from
the server). On the wire and in URLs a task name stays the plain string ``worker:1``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import StringConstraints
from pydantic_core import core_schema

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler


class _WireEnum(StrEnum):
    """A StrEnum that pydantic reads from its plain string (in strict models too) and
    describes inline as the enum of strings it is on the wire, like the Literal it replaces."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(
            cls, core_schema.literal_schema([member.value for member in cls])
        )


class Role(_WireEnum):
    """A task's part in a job, in the order tasks are shown."""

    chief = "chief"  # the coordinator under parameter_server
    worker = "worker"
    ps = "ps"
    evaluator = "evaluator"  # the sidecar evaluator, never in the training cluster


# The roles that form the TensorFlow training cluster: a coordinator that sees the evaluator
# in its cluster spec tries to reach it and can hang.
TRAINING_ROLES: tuple[Role, ...] = (Role.chief, Role.worker, Role.ps)


class Strategy(_WireEnum):
    """The tf.distribute strategy a job trains under."""

    mirrored = "mirrored"
    multi_worker_mirrored = "multi_worker_mirrored"
    parameter_server = "parameter_server"


MAX_TASK_INDEX = 9_999
# One spelling per task (no leading zeros), so that parsing and formatting round-trip.
TASK_NAME_PATTERN = rf"^({'|'.join(Role)}):(0|[1-9]\d{{0,3}})$"
_TASK_NAME = re.compile(TASK_NAME_PATTERN)
_EXPECTED = (
    f"a task name must be role:index with a role in {', '.join(Role)} and an index from 0 to "
    f"{MAX_TASK_INDEX} without leading zeros, such as worker:1"
)

# A task name in a pydantic field or a FastAPI parameter that stays a plain string.
TaskNameText = Annotated[str, StringConstraints(pattern=TASK_NAME_PATTERN)]


def format_task_name(role: str, index: int) -> str:
    """``worker:1``, without building a TaskName: for rows whose role and index are known good
    (a database row, a placement), where thousands are named per controller pass."""
    return f"{role}:{index}"


@dataclass(frozen=True)
class TaskName:
    """One task of a job: ``TaskName(Role.worker, 1)``, written ``worker:1``."""

    role: Role
    index: int

    def __post_init__(self) -> None:
        try:
            role = Role(self.role)
        except ValueError:
            raise ValueError(
                f"{self.role!r} is not a role: expected one of {', '.join(Role)}"
            ) from None
        if isinstance(self.index, bool) or not isinstance(self.index, int):
            raise ValueError(f"a task index must be an integer, got {self.index!r}")
        if not 0 <= self.index <= MAX_TASK_INDEX:
            raise ValueError(f"a task index must be 0 to {MAX_TASK_INDEX}, got {self.index}")
        object.__setattr__(self, "role", role)  # a plain "worker" becomes Role.worker

    @classmethod
    def parse(cls, text: str) -> TaskName:
        """``worker:1`` → ``TaskName(Role.worker, 1)``; anything else is a ValueError."""
        match = _TASK_NAME.fullmatch(text)
        if match is None:
            raise ValueError(f"{_EXPECTED}; got {text!r}")
        return cls(Role(match[1]), int(match[2]))

    def __str__(self) -> str:
        return format_task_name(self.role, self.index)

    @property
    def in_training_cluster(self) -> bool:
        return self.role in TRAINING_ROLES

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # In a pydantic model a TaskName is read from its string and written back as one.
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            json_schema_input_schema=core_schema.str_schema(pattern=TASK_NAME_PATTERN),
            serialization=core_schema.to_string_ser_schema(),
        )

    @classmethod
    def _validate(cls, value: object) -> TaskName:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        raise ValueError(f"{_EXPECTED}; got {value!r}")
