"""Following a job in the terminal: its log lines from the job stream, and its progress.

Log lines go to stdout. The progress (the server's `JobRead.progress`, read every couple of
seconds, and the latest loss from metrics frames) is a bar under the lines where a terminal
shows it: stdout's, else stderr's, so `strata jobs logs -f | grep` keeps a bar and clean
lines. Where neither is a terminal (CI, a file) a plain progress line goes to stderr now and
then instead, and stdout carries nothing but the log.
"""

from __future__ import annotations

import contextlib
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
from backend.cli.progress_view import bar, progress_summary
from backend.jobs.events import EventKind
from backend.jobs.schemas import JobProgress
from backend.rest_client import ClientError, ServerUnreachable, StrataClient

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
DRAIN_SECONDS = 2.0  # after the job ends, lines of stopping tasks may still come
POLL_SECONDS = 2.0  # how often the job is read again for its progress
PLAIN_SECONDS = 30.0  # how often a plain progress line is printed where no terminal shows a bar
PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "red")
METRICS_SHOWN = ("loss", "batch/loss", "accuracy", "val_loss")


def stream_url(server: str, job_id: int) -> str:
    scheme, _, rest = server.rstrip("/").partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/jobs/{job_id}/stream"


@dataclass
class Following:
    """What is known of the job: its status from events, the latest training numbers from
    metrics frames, and the server's progress from the last read of the job."""

    values: dict[str, float] = field(default_factory=dict)
    step: int = 0
    status: str = "pending"
    progress: JobProgress | None = None
    history_done: bool = False  # until then the status is one of the past's

    def take(self, frame: dict[str, Any]) -> None:
        for name, (steps, values, _times) in frame["series"].items():
            if steps and values[-1] is not None:
                self.values[name] = values[-1]
                self.step = max(self.step, int(steps[-1]))

    def _parts(self) -> list[str]:
        parts = []
        if self.progress is not None:
            parts.append(progress_summary(self.progress))
        else:  # no report from the runtime (yet): what the metrics say
            if "epoch" in self.values:
                parts.append(f"epoch {int(self.values['epoch']) + 1}")
            if self.step:
                parts.append(f"step {self.step}")
        for name in METRICS_SHOWN:
            value = self.values.get(name)
            if value is not None and math.isfinite(value):
                parts.append(f"{name} {value:.4g}")
        return parts

    def render(self, job_id: int) -> Text:
        """The bar under the log: 'job 5 running ████░░░░ 1520/4000 38% · … · loss 0.31'."""
        line = Text(f"job {job_id} {self.status} ", style="bold")
        progress = self.progress
        if progress is not None and progress.total_steps is not None:
            drawn = bar(progress.step, progress.total_steps)
            done = drawn.count("█")
            line.append(drawn[:done], style="green")
            line.append(drawn[done:], style="dim")
            line.append(" ")
        line.append(" · ".join(self._parts()), style="bold")
        return line

    def plain(self, job_id: int) -> str:
        """The line printed now and then where there is no terminal for a bar."""
        return f"job {job_id} {self.status}: " + " · ".join(self._parts())


class JobReader:
    """Reads the job every POLL_SECONDS for its progress; a failed read waits for the next."""

    def __init__(self, server: str, token: str | None, job_id: int) -> None:
        self.client = StrataClient(server, token)
        self.job_id = job_id
        self.next_at = time.monotonic()

    def seconds_left(self) -> float:
        return max(0.0, self.next_at - time.monotonic())

    def read_if_due(self, following: Following) -> None:
        if time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + POLL_SECONDS
        # The server restarting, or a moment's refusal: the stream carries on without it.
        with contextlib.suppress(ClientError, ServerUnreachable):
            following.progress = self.client.job(self.job_id).progress

    def close(self) -> None:
        self.client.close()


class PlainLines:
    """A progress line on stderr at most every PLAIN_SECONDS, when there is progress and it
    says something new."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.next_at = 0.0
        self.last = ""

    def offer(self, following: Following, job_id: int) -> None:
        line = following.plain(job_id)
        if (
            not following.history_done
            or following.progress is None
            or line == self.last
            or time.monotonic() < self.next_at
        ):
            return
        self.console.print(escape(line), highlight=False, soft_wrap=True)
        self.last = line
        self.next_at = time.monotonic() + PLAIN_SECONDS


def follow(
    *,
    server: str,
    token: str | None,
    job_id: int,
    console: Console,
    side_console: Console | None = None,
    task_filter: str | None = None,
    progress: bool = True,
    until_done: bool = True,
) -> str:
    """Print the job's log lines to `console` as they come (history first), with its progress
    (see the module's docstring; `side_console` is stderr's); returns its final status."""
    state = Following()
    side = side_console or Console(stderr=True)
    # The bar goes on a terminal: stdout's, under the lines, else stderr's.
    bar_console = console if console.is_terminal else side if side.is_terminal else None
    plain = PlainLines(side) if progress and bar_console is None else None
    reader = JobReader(server, token, job_id) if progress else None
    colours: dict[str, str] = {}
    cursor: str | None = None
    ended_at: float | None = None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    live = Live(
        state.render(job_id) if progress else Text(),
        console=bar_console or console,
        transient=True,
        auto_refresh=False,
        # Lines written to stdout while the bar is on stderr must stay on stdout.
        redirect_stdout=bar_console is not side,
    )

    def show_progress() -> None:
        if reader is not None:
            reader.read_if_due(state)
        if progress:
            live.update(state.render(job_id), refresh=True)
        if plain is not None:
            plain.offer(state, job_id)

    try:
        with live:
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
                            waits = [] if reader is None else [reader.seconds_left()]
                            if ended_at is not None:
                                drained = ended_at + DRAIN_SECONDS - time.monotonic()
                                if drained <= 0:
                                    return state.status
                                waits.append(drained)
                            try:
                                text = websocket.recv(timeout=min(waits) if waits else None)
                            except TimeoutError:
                                show_progress()  # time to read the job again, or to stop
                                continue
                            frame = json.loads(text)
                            cursor = frame.get("cursor", cursor)
                            kind = frame["type"]
                            if kind == "log" and (
                                task_filter is None or frame["task"] == task_filter
                            ):
                                colour = colours.setdefault(
                                    frame["task"], PALETTE[len(colours) % len(PALETTE)]
                                )
                                for line in frame["lines"]:
                                    console.print(
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
                            elif kind == "history_end":
                                state.history_done = True
                                if not until_done:
                                    return state.status
                            show_progress()
                except (ConnectionClosed, OSError, InvalidHandshake) as exc:
                    if isinstance(exc, ConnectionClosed) and exc.rcvd and exc.rcvd.code == 1008:
                        raise RuntimeError(exc.rcvd.reason) from None
                    time.sleep(1.0)  # the server restarted or dropped us: resume from the cursor
    finally:
        if reader is not None:
            reader.close()
