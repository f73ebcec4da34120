"""The scheduler `make test` runs under, driven with stand-in workers: each file whole on one
worker, never more heavy (end-to-end) files at once than its lanes (fewer while light files
are queued), and every test run once."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from tests.support.file_scheduling import FileScheduling, is_heavy, scope_of

HEAVY_FILES = [f"tests/e2e/test_{name}.py" for name in "abcdef"]
COLLECTION = [
    *(f"{file}::test_{i}" for file in HEAVY_FILES for i in range(6)),
    "tests/e2e/test_compose.py::test_one",
    "tests/e2e/test_environments.py::test_one",
    *(f"tests/backend/test_light_{n}.py::test_{i}" for n in range(6) for i in range(3)),
]
HEAVY_SCOPES = len(HEAVY_FILES) + 1  # the two Docker files are one


@dataclass(eq=False)
class StandInWorker:
    """What the scheduler sees of a worker: the tests it was sent, and whether it was told
    to shut down."""

    name: str
    gateway: Any = None
    queue: list[int] = field(default_factory=list)
    shutting_down: bool = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduler(
    workers: int, lanes: int, beside_light: int = 1
) -> tuple[FileScheduling, list[StandInWorker]]:
    config = SimpleNamespace(
        getvalue=lambda name: {"tx": [f"{workers}*popen"]}[name],
        option=SimpleNamespace(loadscopereorder=False),
    )
    scheduling = FileScheduling(config, heavy_lanes=lanes, lanes_beside_light=beside_light)
    nodes = [StandInWorker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        node.gateway = SimpleNamespace(id=node.name)
    for node in nodes:
        scheduling.add_node(node)
        scheduling.add_node_collection(node, COLLECTION)
    scheduling.schedule()
    return scheduling, nodes


def heavy_scopes_running(scheduling: FileScheduling, node: Any) -> list[str]:
    return [
        scope
        for scope, done in scheduling.assigned_work[node].items()
        if is_heavy(scope) and not all(done.values())
    ]


def runnable(node: StandInWorker) -> bool:
    """Like an xdist worker: it runs a test only once another is queued behind it, or once
    it is told to shut down (it needs the next item to run a test's teardown)."""
    return len(node.queue) >= 2 or (node.shutting_down and bool(node.queue))


def run_to_the_end(workers: int, lanes: int, beside_light: int) -> tuple[list[str], int, int]:
    """Runs every worker's tests one at a time, round robin, as they may run. Returns the
    tests in the order they ran, and the most heavy scopes running at once while light
    files were still queued and at any time (workers on heavy files: one lane each)."""
    scheduling, nodes = scheduler(workers, lanes, beside_light)
    ran: list[str] = []
    most_beside_light = most = 0
    while not all(node.shutting_down and not node.queue for node in nodes):
        if scheduling.tests_finished:  # what xdist's session does then
            for node in nodes:
                node.shutdown()
        progressed = False
        for node in nodes:
            running = sum(bool(heavy_scopes_running(scheduling, n)) for n in nodes)
            most = max(most, running)
            if any(not is_heavy(scope) for scope in scheduling.workqueue):
                most_beside_light = max(most_beside_light, running)
            if runnable(node):
                index = node.queue.pop(0)
                ran.append(COLLECTION[index])
                scheduling.mark_test_complete(node, index)
                progressed = True
        stuck = {node.name: node.queue for node in nodes}
        assert progressed or scheduling.tests_finished, f"every worker waits: {stuck}"
    return ran, most_beside_light, most


def test_the_docker_files_are_one_scope_and_the_e2e_files_are_heavy() -> None:
    assert scope_of("tests/e2e/test_compose.py::test_one") == "docker"
    assert scope_of("tests/e2e/test_environments.py::test_x[a]") == "docker"
    assert scope_of("tests/e2e/test_jobs.py::test_x") == "tests/e2e/test_jobs.py"
    assert is_heavy("docker") and is_heavy("tests/e2e/test_jobs.py")
    assert not is_heavy("tests/backend/test_light_0.py")


def test_every_test_runs_once_with_the_heavy_lanes_widening_once_light_files_are_out() -> None:
    for workers, lanes, beside_light in [(4, 1, 1), (4, 2, 1), (4, 3, 2), (2, 1, 1), (3, 3, 3)]:
        case = (workers, lanes, beside_light)
        ran, most_beside_light, most = run_to_the_end(workers, lanes, beside_light)
        assert sorted(ran) == sorted(COLLECTION), case
        assert most_beside_light == beside_light, case
        assert most == min(lanes, workers, HEAVY_SCOPES), case


def test_at_the_start_each_lane_has_one_heavy_file_and_light_ones_fill_the_other_workers() -> None:
    scheduling, nodes = scheduler(workers=4, lanes=3, beside_light=2)
    heavy = [heavy_scopes_running(scheduling, node) for node in nodes]
    assert [len(scopes) for scopes in heavy] == [1, 1, 0, 0]
    for node in nodes[2:]:
        assert all(not is_heavy(scope) for scope in scheduling.assigned_work[node])
