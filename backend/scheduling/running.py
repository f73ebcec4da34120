"""What each agent last reported running, indexed for the controller's most frequent question."""

from __future__ import annotations

from collections import Counter

from agents.protocol import TaskKey


class RunningReports:
    """Each host's last reported set of running attempts, and per task the attempts that run.

    Before a task's next attempt starts, the controller asks whether an earlier one still runs
    anywhere (it holds the port and the GPUs): indexed here, since scanning every host's
    report for every task placed grows with hosts times tasks.
    """

    def __init__(self) -> None:
        self._by_host: dict[str, frozenset[TaskKey]] = {}
        self._attempts: dict[tuple[int, str], Counter[int]] = {}
        self.changes = 0  # how many reports changed something, to notice that one did

    def of(self, host: str) -> frozenset[TaskKey] | None:
        return self._by_host.get(host)

    def same(self, host: str, keys: frozenset[TaskKey]) -> bool:
        """Whether the host's last report is `keys`. If so, `keys` is kept in its place: an
        agent's heartbeats that leave their list out all bring one set, which is then
        compared by identity (element by element, a TaskKey is a pydantic model's __eq__,
        ten thousand a second at a thousand hosts; a start report's key is another object)."""
        known = self._by_host.get(host)
        if known is keys:
            return True
        if known is None or known != keys:
            return False
        self._by_host[host] = keys
        return True

    def report(self, host: str, keys: frozenset[TaskKey]) -> None:
        known = self._by_host.get(host)
        if known == keys:
            return
        # A host that runs nothing is recorded too: `of` then says so (an empty set), where
        # None means "never reported", which makes every heartbeat ask for a comparison.
        previous = known or frozenset()
        for key in previous - keys:
            attempts = self._attempts[(key.job_id, key.task)]
            attempts[key.attempt] -= 1
            if attempts[key.attempt] <= 0:
                del attempts[key.attempt]
            if not attempts:
                del self._attempts[(key.job_id, key.task)]
        for key in keys - previous:
            self._attempts.setdefault((key.job_id, key.task), Counter())[key.attempt] += 1
        self._by_host[host] = keys
        self.changes += 1

    def started(self, host: str, key: TaskKey) -> None:
        """The host reported starting this attempt: it runs it. Its next heartbeat lists it,
        and that alone is no change to compare (the start report is checked as it is
        applied). A host never reported stays unknown: its heartbeat is compared."""
        known = self._by_host.get(host)
        if known is not None and key not in known:
            self.report(host, known | {key})

    def exited(self, host: str, key: TaskKey) -> None:
        """The host reported this attempt's exit: it no longer runs it. Exits travel before
        later heartbeats on the agent's channel, so the next one will agree."""
        known = self._by_host.get(host)
        if known is not None and key in known:
            self.report(host, known - {key})

    def forget(self, host: str) -> None:
        """The host is gone, and what it ran with it."""
        if host in self._by_host:
            self.report(host, frozenset())
            del self._by_host[host]

    def job_runs(self, job_id: int) -> bool:
        return any(job == job_id for job, _ in self._attempts)

    def earlier_attempt_runs(self, job_id: int, task: str, attempt: int) -> bool:
        return any(a < attempt for a in self._attempts.get((job_id, task), ()))
