"""How `make test` hands test files to pytest-xdist workers.

Each file runs whole on one worker, so a module's fixtures (a cluster, a Slurm, an image) are
made once. Files that start clusters of TensorFlow processes (tests/e2e/) are heavy, each
under deadlines of its own: while light files are still queued, `lanes_beside_light` workers
run heavy ones and the others take the light files; once every light file is handed out, up
to `heavy_lanes` workers run heavy ones. A worker on a heavy file queues its next heavy
file behind its own, in the same lane. The Docker files share one scope: two engines on one
machine contend for the default bridge and its iptables rules.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

E2E_DIR = "tests/e2e/"
DOCKER_FILES = frozenset({"tests/e2e/test_compose.py", "tests/e2e/test_environments.py"})
DOCKER_SCOPE = "docker"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scope_of(nodeid: str) -> str:
    file = file_of(nodeid)
    return DOCKER_SCOPE if file in DOCKER_FILES else file


def is_heavy(scope: str) -> bool:
    return scope == DOCKER_SCOPE or scope.startswith(E2E_DIR)


class FileScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """LoadScopeScheduling by file, with a bounded number of workers on heavy files."""

    def __init__(
        self, config: Any, log: Any = None, *, heavy_lanes: int, lanes_beside_light: int = 1
    ) -> None:
        super().__init__(config, log)
        self.heavy_lanes = max(1, heavy_lanes)
        self.lanes_beside_light = max(1, min(lanes_beside_light, self.heavy_lanes))

    def _lanes(self) -> int:
        light_queued = any(not is_heavy(scope) for scope in self.workqueue)
        return self.lanes_beside_light if light_queued else self.heavy_lanes

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _runs_heavy(self, node: Any) -> bool:
        return any(
            is_heavy(scope) and not all(done.values())
            for scope, done in self.assigned_work.get(node, {}).items()
        )

    def _next_scope(self, node: Any) -> str | None:
        """The first queued scope this node may take: a heavy one only while fewer other
        workers than the lanes have one. A worker's own heavy file does not stop it: a
        worker runs its last test only once it has another (or is told to stop), so the
        next heavy file queues behind it in the same lane."""
        others = sum(self._runs_heavy(other) for other in self.nodes if other is not node)
        heavy_allowed = others < self._lanes()
        queued: list[str] = list(self.workqueue)
        return next((s for s in queued if heavy_allowed or not is_heavy(s)), None)

    def _assign_work_unit(self, node: Any) -> None:
        if node not in self.registered_collections:
            return  # a worker started in place of a crashed one, not done collecting yet
        scope = self._next_scope(node)
        if scope is None:
            return  # only heavy files are left, and their lanes are full: wait for one
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some(
            [collection.index(nodeid) for nodeid, completed in work_unit.items() if not completed]
        )

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        # A heavy lane may have come free, or the queue run dry: every other worker looks
        # again (one that holds its last test waits for new work or the word to stop).
        for other in self.nodes:
            if other is not node:
                self._reschedule(other)
