"""How often agents beat: the configured period, stretched as the fleet grows.

A heartbeat costs the server little, but a large fleet beating every second adds up to most
of a core. So once the connected agents would send more than
`max_heartbeats_per_second` in all, the period grows with their number, and the silence after
which a host is lost grows with it. The period only ever grows while the server runs, so that
no agent has been told a period longer than the one its silence is judged by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.config import Settings

# The connected agents are told a new period once it has grown by a quarter: telling every
# agent at every join would be a frame per agent per join.
STEP = 1.25


@dataclass
class HeartbeatPace:
    least_seconds: float  # the configured period (STRATA_HEARTBEAT_SECONDS)
    most_per_second: float  # heartbeats the whole fleet may send a second
    least_timeout_seconds: float  # the silence that loses a host at the configured period
    seconds: float = field(init=False)  # the period agents are told now

    def __post_init__(self) -> None:
        self.seconds = self.least_seconds

    @classmethod
    def from_settings(cls, settings: Settings) -> HeartbeatPace:
        return cls(
            least_seconds=settings.heartbeat_seconds,
            most_per_second=settings.max_heartbeats_per_second,
            least_timeout_seconds=settings.heartbeat_timeout_seconds,
        )

    @property
    def timeout_seconds(self) -> float:
        """The silence after which a host is lost, stretched as the period is."""
        return self.least_timeout_seconds * self.seconds / self.least_seconds

    def fleet_of(self, agents: int) -> bool:
        """Take in how many agents are connected. True when the period has grown enough
        that the connected agents should be told it."""
        wanted = agents / self.most_per_second
        if wanted < self.seconds * STEP:
            return False
        self.seconds = wanted
        return True
