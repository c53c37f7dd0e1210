"""A window that stays full (issue 43): the pod fetches nothing and polls, its partitions
paused, only every KEEP_IN_GROUP_S, which keeps it in its group (aiokafka leaves the group
after max.poll.interval.ms without a `getmany`) without dropping the prefetched records every
half second; a revoke meanwhile does not wait for a poll (the group calls the listener)."""

from __future__ import annotations

from collections.abc import Sequence

from cases import answer
from oracle import check, revokes_leave_half_the_timeout
from simkafka import SimCluster, SimConsumer
from world import quiet, simulate

from dispatcher.kafka.seam import Fetched, TopicPartition
from dispatcher.pod.engine import FULL_WINDOW_WAIT_S, KEEP_IN_GROUP_S

CALL_S = 30.0  # every call answers after this: windows of 2 stay full for 30 s at a time


class PollsNoted(SimConsumer):
    """The simulated consumer, noting when each `getmany` was called."""

    def __init__(self, cluster: SimCluster, member_id: str, max_poll_records: int) -> None:
        super().__init__(cluster, member_id, max_poll_records)
        self.cluster = cluster
        self.polls: list[float] = []

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int,
                      max_records: int | None = None) -> Fetched:
        self.polls.append(self.cluster.now)
        return await super().getmany(*partitions, timeout_ms=timeout_ms,
                                     max_records=max_records)


def _polls_between(polls: Sequence[float], start: float, end: float) -> list[float]:
    return [at for at in polls if start <= at <= end]


def test_a_full_window_polls_to_stay_in_its_group_but_only_every_few_seconds() -> None:
    """Window 2, calls of 30 s: while the first two calls run, the pod polls at most every
    KEEP_IN_GROUP_S (plus one wake-up), and not every FULL_WINDOW_WAIT_S as it did; all
    records are still called once."""
    log = simulate(quiet({"concurrency": 2, "deadline": 60.0}, partitions=2, records=8,
                         handle=answer(lambda _v: CALL_S), make_consumer=PollsNoted))
    consumer = log.pods[0].consumer
    assert isinstance(consumer, PollsNoted)
    polls = _polls_between(consumer.polls, 1.0, CALL_S - 1.0)
    gaps = [b - a for a, b in zip([1.0, *polls], [*polls, CALL_S - 1.0], strict=True)]
    assert max(gaps) <= KEEP_IN_GROUP_S + FULL_WINDOW_WAIT_S + 0.01, gaps
    assert 1 <= len(polls) <= 4, polls  # every FULL_WINDOW_WAIT_S (before issue 43): 56
    assert len({c.wait_id for c in log.calls}) == 8
    assert check(log) == []


def test_a_revoke_while_the_window_is_full_does_not_wait_for_a_poll() -> None:
    """A second pod joins 5 s into a full window (the next poll 5 s away): the first pod's
    revoke starts at the rebalance and ends within half the rebalance timeout; the records
    it prepared ahead go to the new owner, and nothing is lost."""
    log = simulate(quiet({"concurrency": 2, "deadline": 60.0}, partitions=2, records=8,
                         handle=answer(lambda _v: CALL_S), events=[(5.0, "join")]))
    first = log.pods[0].name
    revokes = [r for r in log.cluster.revokes if r.member == first]
    assert revokes and revokes[0].started < 5.5  # the poll that keeps it in the group: ~10 s
    assert revokes_leave_half_the_timeout(log) == []
    assert check(log) == []
