"""Host states. Pure data, no I/O."""

from __future__ import annotations

from enum import StrEnum


class HostStatus(StrEnum):
    # Stored as a plain string with no CHECK constraint (a non-native enum): adding or
    # dropping a value needs no migration, only that no row holds a dropped one.
    online = "online"
    lost = "lost"  # heartbeats stopped
