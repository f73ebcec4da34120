"""A member's role in a project, and the names users and projects may have."""

from __future__ import annotations

import re
from enum import StrEnum

# Users and projects: lower case, so that "Alice" and "alice" are never two people.
TEAM_NAME_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"
TEAM_NAME = re.compile(TEAM_NAME_PATTERN)

# The project every job belongs to when nothing else is said (the migration creates it).
DEFAULT_PROJECT = "default"


class ProjectRole(StrEnum):
    """viewer < member < admin: each may do what the ones before it may."""

    viewer = "viewer"  # read the project's jobs
    member = "member"  # and submit and control them
    admin = "admin"  # and manage the members and the settings

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ProjectRole):
            return NotImplemented
        return self.rank < other.rank

    # StrEnum compares as str otherwise; these keep the ranking for every operator.
    def __le__(self, other: object) -> bool:
        if not isinstance(other, ProjectRole):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, ProjectRole):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, ProjectRole):
            return NotImplemented
        return self.rank >= other.rank


_RANKS = {ProjectRole.viewer: 0, ProjectRole.member: 1, ProjectRole.admin: 2}
