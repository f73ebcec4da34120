"""Following a job in the terminal: its log lines and a progress line, from the job stream."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import connect

from agents.tls import CA_FILE_ENV, client_ssl
from backend.jobs.event_kinds import EventKind

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
DRAIN_SECONDS = 2.0  # after the job ends, lines of stopping tasks may still come
PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "red")


def stream_url(server: str, job_id: int) -> str:
    scheme, _, rest = server.rstrip("/").partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/jobs/{job_id}/stream"


@dataclass
class Progress:
    """The latest training numbers, from metrics frames."""

    values: dict[str, float] = field(default_factory=dict)
    step: int = 0
    status: str = "pending"

    def take(self, frame: dict[str, Any]) -> None:
        for name, (steps, values, _times) in frame["series"].items():
            if steps and values[-1] is not None:
                self.values[name] = values[-1]
                self.step = max(self.step, int(steps[-1]))

    def render(self, job_id: int) -> Text:
        parts = [f"job {job_id} {self.status}"]
        if "epoch" in self.values:
            parts.append(f"epoch {int(self.values['epoch']) + 1}")
        if self.step:
            parts.append(f"step {self.step}")
        for name in ("loss", "batch/loss", "accuracy", "val_loss", "steps_per_sec"):
            value = self.values.get(name)
            if value is not None and math.isfinite(value):
                parts.append(f"{name} {value:.4g}")
        return Text(" · ".join(parts), style="bold")


def follow(
    *,
    server: str,
    token: str | None,
    job_id: int,
    console: Console,
    task_filter: str | None = None,
    progress: bool = True,
    until_done: bool = True,
) -> str:
    """Print the job's log lines as they come (history first); returns its final status."""
    state = Progress()
    colours: dict[str, str] = {}
    cursor: str | None = None
    ended_at: float | None = None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with Live(state.render(job_id), console=console, transient=True, auto_refresh=False) as live:
        while True:
            try:
                url = stream_url(server, job_id)
                with connect(
                    url,
                    additional_headers=headers,
                    ssl=client_ssl(url, os.environ.get(CA_FILE_ENV)),
                    open_timeout=10,
                    max_size=None,
                ) as websocket:
                    websocket.send(json.dumps({"type": "subscribe", "cursor": cursor}))
                    while True:
                        timeout = (
                            None
                            if ended_at is None
                            else max(0.0, ended_at + DRAIN_SECONDS - time.monotonic())
                        )
                        try:
                            frame = json.loads(websocket.recv(timeout=timeout))
                        except TimeoutError:
                            return state.status
                        cursor = frame.get("cursor", cursor)
                        kind = frame["type"]
                        if kind == "log" and (task_filter is None or frame["task"] == task_filter):
                            colour = colours.setdefault(
                                frame["task"], PALETTE[len(colours) % len(PALETTE)]
                            )
                            for line in frame["lines"]:
                                live.console.print(
                                    f"[{colour}]{frame['task']:>10}[/{colour}] {escape(line)}",
                                    highlight=False,
                                    soft_wrap=True,
                                )
                        elif kind == "metrics":
                            state.take(frame)
                        elif kind == "event" and frame["event"]["kind"] == EventKind.status:
                            state.status = frame["event"]["to_status"]
                            if state.status in TERMINAL and until_done and ended_at is None:
                                ended_at = time.monotonic()
                        elif kind == "history_end" and not until_done:
                            return state.status
                        if progress:
                            live.update(state.render(job_id), refresh=True)
            except (ConnectionClosed, OSError, InvalidHandshake) as exc:
                if isinstance(exc, ConnectionClosed) and exc.rcvd and exc.rcvd.code == 1008:
                    raise RuntimeError(exc.rcvd.reason) from None
                time.sleep(1.0)  # the server restarted or dropped us: resume from the cursor
