"""What the controller notes in memory about hosts' health between passes: health reports
not yet applied, and each host's recent infrastructure failures.

Reports are noted as heartbeats arrive, before any lock, and only when what they found
changed: a fleet of healthy hosts costs a comparison per report and nothing more. Failures are
noted once the transaction that applied them has committed. Both are lost with a restart of
the server: agents report their health again within seconds, and failures are counted afresh.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agents.protocol import HealthFault, HostHealth
from backend.hosts.health import clock_fault

# (kind, GPU, path, count): what a fault is, its wording left out (free space and clock
# offsets are worded afresh in each report).
Signature = tuple[tuple[str, int | None, str | None, int | None], ...]


def signature(faults: list[HealthFault]) -> Signature:
    return tuple(sorted((f.kind, f.device, f.path, f.count) for f in faults))


@dataclass(frozen=True)
class Findings:
    faults: list[HealthFault]
    warnings: list[HealthFault]


@dataclass
class HealthNotes:
    clock_limit: float = 30.0  # seconds an agent's clock may be off (0: not judged)
    reports: dict[str, Findings] = field(default_factory=dict)  # for the next pass
    _seen: dict[str, tuple[Signature, Signature]] = field(default_factory=dict)
    failures: dict[str, deque[tuple[float, dict[str, Any]]]] = field(default_factory=dict)
    _in_flight: dict[str, Findings] = field(default_factory=dict)  # taken, not yet committed

    def report(self, host: str, health: HostHealth, received: float | None = None) -> bool:
        """Note a host's report (received: the server's wall time then); True when it found
        something other than the last one did, for the next pass to apply."""
        received = time.time() if received is None else received
        faults = list(health.faults)
        clock = clock_fault(health.wall_time - received, self.clock_limit)
        if clock is not None:
            faults.append(clock)
        seen = (signature(faults), signature(list(health.warnings)))
        if self._seen.get(host) == seen:
            return False
        self._seen[host] = seen
        self.reports[host] = Findings(faults, list(health.warnings))
        return True

    def take_reports(self) -> dict[str, Findings]:
        """The reports to apply, with those a pass took and did not commit (newer win)."""
        taken = {**self._in_flight, **self.reports}
        self.reports, self._in_flight = {}, taken
        return taken

    def applied(self) -> None:
        """The reports taken last were committed."""
        self._in_flight = {}

    def failed(self, host: str, evidence: dict[str, Any], at: float | None = None) -> None:
        """A task on that host failed for an infrastructure cause (`evidence` says which)."""
        self.failures.setdefault(host, deque(maxlen=1000)).append(
            (time.monotonic() if at is None else at, evidence)
        )

    def tripped(
        self, count: int, minutes: float, now: float | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """Hosts with at least `count` failures within the last `minutes`, with them; their
        count starts again. Older failures are forgotten."""
        if count <= 0 or minutes <= 0:
            self.failures.clear()
            return {}
        now = time.monotonic() if now is None else now
        found = {}
        for host in list(self.failures):
            recent = self.failures[host]
            while recent and now - recent[0][0] > minutes * 60:
                recent.popleft()
            if len(recent) >= count:
                found[host] = [evidence for _, evidence in recent]
                recent.clear()
            if not recent:
                del self.failures[host]
        return found

    def forget(self, host: str) -> None:
        """The host's name was released: all that was noted of it."""
        self.reports.pop(host, None)
        self._in_flight.pop(host, None)
        self._seen.pop(host, None)
        self.failures.pop(host, None)
