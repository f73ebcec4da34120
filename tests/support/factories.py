"""Factories for specs and rows, so that each test says only what matters to it."""

from __future__ import annotations

import copy
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agents.runtime_environment import EngineInfo
from backend.cluster.service import DeviceInfo, register_host
from backend.hosts.models import Host

BASE_SPECS: dict[str, dict[str, Any]] = {
    "parameter_server": {
        "name": "digits-ps",
        "strategy": "parameter_server",
        "entrypoint": ["python", "examples/digits.py", "--epochs", "2"],
        "replicas": {"chief": {"count": 1}, "worker": {"count": 2}, "ps": {"count": 1}},
    },
    "multi_worker_mirrored": {
        "name": "digits-mwm",
        "strategy": "multi_worker_mirrored",
        "entrypoint": ["python", "examples/digits.py"],
        "replicas": {"worker": {"count": 2}},
    },
    "mirrored": {
        "name": "digits-mirrored",
        "strategy": "mirrored",
        "entrypoint": ["python", "examples/digits.py"],
        "replicas": {"chief": {"count": 1, "gpus": 1}},
    },
}


def make_spec(base: str = "parameter_server", /, **overrides: Any) -> dict[str, Any]:
    """A valid spec document for the base strategy, with top-level fields replaced."""
    spec = copy.deepcopy(BASE_SPECS[base])
    spec.update(overrides)
    return spec


async def make_host(
    session: AsyncSession,
    name: str = "host-a",
    *,
    gpus: int = 2,
    address: str = "127.0.0.1",
    port_range: tuple[int, int] = (42000, 42099),
    identity: str | None = None,
    engine: EngineInfo | None = None,
) -> Host:
    devices = [DeviceInfo(index=i, name="Simulated GPU", simulated=True) for i in range(gpus)]
    return await register_host(
        session=session,
        name=name,
        address=address,
        port_range=port_range,
        devices=devices,
        identity=identity,
        engine=engine,
    )
