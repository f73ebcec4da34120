"""Strata's runtime for tasks that run in another Python environment.

A task in a container image or under another interpreter (`environment.image`,
`environment.python`) has TensorFlow but not Strata. The agent lends it its own runtime: the
`agents` package and the pure-Python packages it imports (pydantic's compiled core included,
so the environment's Python must be the agent's minor version), put first on PYTHONPATH: in a
container as read-only mounts under RUNTIME_MOUNT, on the host as a folder of symlinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
from functools import cache
from pathlib import Path

RUNTIME_MOUNT = "/opt/strata-runtime"
# What `import agents.runtime` and `python -m agents.runtime.server` import beyond the
# standard library and TensorFlow.
RUNTIME_PACKAGES = (
    "agents",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "typing_extensions",
    "websockets",
)
AGENT_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@cache
def runtime_sources() -> dict[str, Path]:
    """Each runtime package's name in the mount (a folder, or a module file) -> its path here."""
    sources: dict[str, Path] = {}
    for name in RUNTIME_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"the agent's environment lacks {name}, which tasks need")
        origin = Path(spec.origin)
        if spec.submodule_search_locations:
            sources[name] = origin.parent
        else:
            sources[origin.name] = origin
    return sources


def host_runtime_dir() -> Path:
    """A folder of symlinks to the runtime packages, for tasks under another interpreter here;
    made once per set of sources (atomically: agents on one host may make it at once)."""
    sources = runtime_sources()
    listing = "\n".join(f"{name}={path}" for name, path in sorted(sources.items()))
    tag = hashlib.sha256(listing.encode()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"strata-runtime-{os.getuid()}-{tag}"
    if target.is_dir():
        return target
    building = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
    for name, path in sources.items():
        (building / name).symlink_to(path)
    try:
        building.rename(target)
    except OSError:  # another agent made it first: theirs is the same
        for link in building.iterdir():
            link.unlink()
        with contextlib.suppress(OSError):
            building.rmdir()
    return target


def with_runtime_path(env: dict[str, str], runtime_dir: str) -> dict[str, str]:
    """`env` with the runtime first on PYTHONPATH (the job's own entries after it)."""
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{runtime_dir}{os.pathsep}{existing}" if existing else runtime_dir
    return env


_versions: dict[str, str] = {}


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


async def interpreter_version(python: str) -> str:
    """`python`'s major.minor (asked once per path); RuntimeError if it cannot be run."""
    if python in _versions:
        return _versions[python]
    if not _is_executable(python):
        raise RuntimeError(f"environment.python {python} is not an executable file on this host")
    probe = await asyncio.create_subprocess_exec(
        python,
        "-c",
        "import sys; print('%d.%d' % sys.version_info[:2])",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(30):
            out, _ = await probe.communicate()
    except TimeoutError:
        probe.kill()
        raise RuntimeError(f"environment.python {python} did not answer within 30 s") from None
    version = out.decode(errors="replace").strip()
    if probe.returncode != 0 or not version:
        raise RuntimeError(f"environment.python {python} is not a Python interpreter")
    _versions[python] = version
    return version
