"""Where a job's tasks run: the agent's own interpreter (the default), another interpreter on
the hosts (`environment.python`), or a container image (`environment.image`).

Defined once for the job spec, the agent channel and the agent's container runner, and what
an agent says it can run (`EngineInfo`, sent in its hello) so that placement only picks hosts
that can.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

MAX_IMAGES_ADVERTISED = 512  # images an agent lists in its hello (the newest first)

# An image reference as the Docker engine reads it: [host[:port]/]path[:tag][@digest], with
# lowercase path components joined by '.', '_', '__' or '-'s (distribution's reference grammar).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*"
IMAGE_REFERENCE = re.compile(
    rf"(?:{_DOMAIN}(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
MAX_IMAGE_NAME = 255  # the engine's limit on a repository name


def check_image_reference(value: str) -> str:
    """The reference itself, or a ValueError that says what a valid one looks like."""
    name = value.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    if not IMAGE_REFERENCE.fullmatch(value) or len(name) > MAX_IMAGE_NAME:
        raise ValueError(
            f"{value[:300]!r} is not a valid image reference: expected"
            " [registry[:port]/]name[:tag][@sha256:digest], with a lowercase name of at most"
            f" {MAX_IMAGE_NAME} characters (e.g. 'tensorflow/tensorflow:2.21.0')"
        )
    return value


def check_python_path(value: str) -> str:
    if not value.startswith("/") or "\x00" in value or len(value) > 4096:
        raise ValueError(
            f"must be the absolute path of an interpreter on the hosts (e.g."
            f" /opt/conda/envs/tf/bin/python), got {value[:300]!r}"
        )
    return value


ImageReference = Annotated[str, AfterValidator(check_image_reference)]
PythonPath = Annotated[str, AfterValidator(check_python_path)]


class RuntimeEnvironment(BaseModel):
    """At most one of `image` and `python`; neither means the agent's own interpreter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: ImageReference | None = Field(
        default=None,
        description="Run each task in a container of this image (host network, the task's"
        " GPUs, the code bundle and checkpoint root mounted); the image needs TensorFlow.",
    )
    python: PythonPath | None = Field(
        default=None,
        description="Run `python` as this interpreter, already installed on every host.",
    )

    @model_validator(mode="after")
    def _one_of(self) -> RuntimeEnvironment:
        if self.image is not None and self.python is not None:
            raise ValueError(
                "give environment.image or environment.python, not both: the image brings"
                " its own interpreter"
            )
        return self


class EngineInfo(BaseModel):
    """The container engine an agent can start tasks in, as it says in its hello."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(default="docker", max_length=32)
    version: str = Field(max_length=64)
    nvidia: bool = False  # the NVIDIA runtime is installed: GPUs are passed as device requests
    # Tagged images present on the host; others are pulled when a task needs them.
    images: list[Annotated[str, Field(max_length=512)]] = Field(
        default_factory=list, max_length=MAX_IMAGES_ADVERTISED
    )
