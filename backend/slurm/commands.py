"""The Slurm commands on the server's host (sbatch, squeue, scancel, sacct), output parsed.

Every call runs one command without a shell, with SLURM_CONF when the settings name one, and
a time limit. A command that fails raises SlurmError carrying Slurm's own message (what the
command wrote to stderr), which is what a user is shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Accounting = Literal["sacct", "completion", "none"]
# Fields of squeue and sacct lines, in this order, joined by FIELD_SEPARATOR. The comment and
# the name come last: only they could hold the separator, and split(maxsplit) keeps them whole.
FIELD_SEPARATOR = "|"
SQUEUE_FORMAT = FIELD_SEPARATOR.join(("%i", "%T", "%r", "%N", "%j", "%k"))
SACCT_FIELDS = "JobID,State,ExitCode,NodeList,JobName"
# Slurm's states in which the job holds or will hold an allocation.
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)


class SlurmError(Exception):
    """A Slurm command failed; the message is Slurm's own."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(message)
        self.command = command
        self.message = message


class SlurmUnavailable(SlurmError):
    """The command could not run, or could not reach the Slurm controller."""


@dataclass(frozen=True)
class QueuedJob:
    """A job as squeue shows it (finished jobs too, for the controller's MinJobAge)."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, ...
    reason: str  # why it waits or ended: Resources, Priority, None
    nodes: str  # n[1-2]; empty while pending
    name: str
    comment: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


@dataclass(frozen=True)
class AccountedJob:
    """A job as the accounting (sacct) recorded it, once it has left the queue."""

    job_id: str
    state: str  # the state word: CANCELLED for "CANCELLED by 0"
    detail: str  # what followed the word ("by 0"), or ""
    exit_code: str  # "code:signal"
    nodes: str
    name: str


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines) if lines else ""


# What the commands print when they cannot reach slurmctld: the server tries again later.
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Could not establish a configuration source",
)


class SlurmCommands:
    """Slurm's command line tools, as the server runs them."""

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        conf: Path | None = None,
        timeout: float = 30.0,
        accounting: Accounting = "sacct",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.bin_dir = bin_dir
        self.timeout = timeout
        self.accounting = accounting
        # The server's own settings (tokens among them) never reach sbatch, and so never the
        # job's environment, which sbatch exports to the allocation.
        self.env = {
            key: value
            for key, value in (os.environ if environ is None else environ).items()
            if not key.startswith("STRATA_")
        }
        if conf is not None:
            self.env["SLURM_CONF"] = str(conf)

    def _tool(self, name: str) -> str:
        return str(self.bin_dir / name) if self.bin_dir is not None else name

    async def run(
        self,
        tool: str,
        args: Sequence[str],
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """The command's stdout; SlurmError (or SlurmUnavailable) with its stderr if it fails."""
        argv = [self._tool(tool), *args]
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**self.env, **(env or {})},
            )
        except OSError as exc:
            raise SlurmUnavailable(tool, f"cannot run {argv[0]}: {exc.strerror}") from None
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await process.communicate(None if stdin is None else stdin.encode())
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise SlurmUnavailable(
                tool, f"{tool} did not answer within {self.timeout:g}s"
            ) from None
        stderr = err.decode(errors="replace")
        if process.returncode != 0:
            message = _first_line(stderr) or f"{tool} exited with {process.returncode}"
            unreachable = any(marker in stderr for marker in _UNREACHABLE)
            raise (SlurmUnavailable if unreachable else SlurmError)(tool, message)
        return out.decode(errors="replace")

    async def submit(
        self, script: str, options: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> str:
        """sbatch the script (given on stdin) with these options and these variables added
        to its environment (which sbatch exports to the job); the new job's id."""
        out = await self.run("sbatch", ["--parsable", *options], stdin=script, env=env)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError("sbatch", f"sbatch printed no job id: {out.strip()[:200]!r}")
        return job_id

    async def test_submit(self, script: str, options: Sequence[str]) -> None:
        """sbatch --test-only: raises SlurmError with Slurm's message if it would refuse."""
        await self.run("sbatch", ["--test-only", *options], stdin=script)

    async def queue(self, *, names: Sequence[str]) -> list[QueuedJob]:
        """The jobs of these names squeue knows, in any state."""
        if not names:
            return []
        out = await self.run(
            "squeue",
            [
                "--noheader",
                "--states=all",
                f"--name={','.join(names)}",
                f"--format={SQUEUE_FORMAT}",
            ],
        )
        jobs = []
        for line in out.splitlines():
            fields = line.split(FIELD_SEPARATOR, 5)
            if len(fields) != 6:
                continue
            job_id, state, reason, nodes, name, comment = (f.strip() for f in fields)
            nodes = "" if nodes in ("", "(null)") else nodes
            comment = "" if comment == "(null)" else comment
            jobs.append(QueuedJob(job_id, state, reason, nodes, name, comment))
        return jobs

    async def cancel(self, job_id: str) -> None:
        """scancel the job; one that has already ended is no error."""
        try:
            await self.run("scancel", ["--quiet", job_id])
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            if "Invalid job id" not in exc.message and "already completing" not in exc.message:
                raise

    async def accounted(self, job_ids: Sequence[str]) -> list[AccountedJob]:
        """What the accounting says about these jobs (nothing when it is switched off)."""
        if not job_ids or self.accounting == "none":
            return []
        mode = ["--completion"] if self.accounting == "completion" else ["--allocations"]
        out = await self.run(
            "sacct",
            [
                *mode,
                "--noheader",
                "--parsable2",
                f"--jobs={','.join(job_ids)}",
                f"--format={SACCT_FIELDS}",
            ],
        )
        found = []
        for line in out.splitlines():
            fields = line.split(FIELD_SEPARATOR, 4)
            if len(fields) != 5 or "." in fields[0]:  # steps (12.batch) are not the job
                continue
            job_id, state, exit_code, nodes, name = fields
            word, _, detail = state.partition(" ")
            found.append(AccountedJob(job_id, word, detail, exit_code, nodes, name))
        return found
