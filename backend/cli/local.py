"""`strata up`: the server in this process and N local agents as child processes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from backend.app import create_app
from backend.cli.collector import settle_for_serving
from backend.cli.server_logging import server_log_config
from backend.config import Settings

log = logging.getLogger(__name__)

DEMO_SPEC = Path("examples/digits_ps.yaml")
# Below the kernel's ephemeral ports (32768-60999 on Linux): an outgoing connection or a
# test's throwaway server never holds a port a task is about to bind.
AGENT_PORT_BASE = 20000
AGENT_PORTS_EACH = 100


@dataclass
class LocalCluster:
    settings: Settings
    agents: int
    gpus_per_agent: int
    workspace: Path
    demo: bool
    warm_pool: int | None = None  # None: the agents' own default (or STRATA_AGENT_WARM_POOL)

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    async def run(self) -> None:
        config = uvicorn.Config(
            create_app(self.settings),
            host=self.settings.host,
            port=self.settings.port,
            log_level=self.settings.log_level,
            log_config=server_log_config(
                self.settings.log_level, access_log=self.settings.access_log
            ),
            access_log=self.settings.access_log,
            ws="websockets-sansio",
        )
        server = uvicorn.Server(config)
        settle_for_serving()
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                await serving  # it failed to start: raise why
                return
            await asyncio.sleep(0.05)
        children = [await self._start_agent(i) for i in range(self.agents)]
        try:
            if self.demo:
                await self._submit_demo()
            await serving  # until Ctrl-C (uvicorn handles SIGINT and SIGTERM)
        finally:
            await _stop_all(children)

    async def _start_agent(self, index: int) -> asyncio.subprocess.Process:
        assert self.settings.agent_token is not None
        logs = self.settings.data_dir / "agents"
        logs.mkdir(parents=True, exist_ok=True)
        low = AGENT_PORT_BASE + index * AGENT_PORTS_EACH
        with (logs / f"local-{index}.log").open("ab") as out:
            return await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "backend.cli",
                "agent",
                "--server",
                self.url,
                "--name",
                f"local-{index}",
                "--gpus",
                str(self.gpus_per_agent),
                "--port-range",
                f"{low}-{low + AGENT_PORTS_EACH - 1}",
                "--workspace",
                str(self.workspace),
                "--state-dir",
                str(logs / f"local-{index}"),
                *([] if self.warm_pool is None else ["--warm-pool", str(self.warm_pool)]),
                env={
                    **os.environ,
                    "STRATA_AGENT_TOKEN": self.settings.agent_token.get_secret_value(),
                },
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )

    async def _submit_demo(self) -> None:
        spec = self.workspace / DEMO_SPEC
        if not spec.exists():
            log.warning("no %s under %s: not submitting the demo job", DEMO_SPEC, self.workspace)
            return
        assert self.settings.api_token is not None
        headers = {"Authorization": f"Bearer {self.settings.api_token.get_secret_value()}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers) as client:
            for _ in range(200):  # wait for the agents, so the demo starts at once
                hosts = (await client.get("/hosts")).json()
                if sum(h["status"] == "online" for h in hosts) >= self.agents:
                    break
                await asyncio.sleep(0.1)
            response = await client.post(
                "/jobs", content=spec.read_bytes(), headers={"Content-Type": "application/yaml"}
            )
        job = response.json()
        print(
            f"demo: submitted job {job.get('id')} ({job.get('name')}); "
            f"watch it with `strata jobs show {job.get('id')}`",
            flush=True,
        )


async def _stop_all(children: list[asyncio.subprocess.Process]) -> None:
    """SIGTERM every agent (they stop their tasks), then SIGKILL any that linger."""
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            async with asyncio.timeout(30):
                await child.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
