"""Offset commits on the simulated Kafka: a committed offset never goes backwards, also when a
slow periodic commit is still in flight when the next (or the shutdown) commit runs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from cases import answer, committed, committed_to_end
from oracle import check
from simkafka import CommitEntry, SimCluster, SimConsumer
from world import Input, World, quiet, simulate, until

from dispatcher.kafka.seam import TopicPartition

COUNT = 60


class SlowCommitConsumer(SimConsumer):
    """Commit requests that can be held back once, as a slow network or one of aiokafka's own
    commit retries would; like aiokafka's request, the held one is shielded: it lands 2 s later
    even if its caller is cancelled (the broker accepts it: it was sent in time)."""

    hold_next = False
    held: list[int] = []  # noqa: RUF012 - one test's state

    def __init__(self, cluster: SimCluster, member_id: str, max_poll_records: int) -> None:
        super().__init__(cluster, member_id, max_poll_records)
        self._sim = cluster

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if not SlowCommitConsumer.hold_next:
            await super().commit(offsets)
            return
        SlowCommitConsumer.hold_next = False
        SlowCommitConsumer.held.extend(offsets.values())

        async def late() -> None:
            await asyncio.sleep(2.0)
            for tp, offset in offsets.items():
                self._sim.committed[tp] = offset
                self._sim.commits.append(CommitEntry(self._sim.now, self.member_id, tp, offset))

        await asyncio.shield(asyncio.ensure_future(late()))


def test_committed_offsets_never_go_backwards_when_commits_overlap() -> None:
    """Issue 9 defect 5: a periodic commit still in flight when the shutdown commit ran could
    land last, moving the group's committed offset backwards."""
    SlowCommitConsumer.hold_next, SlowCommitConsumer.held = False, []

    async def hold_one_commit(world: World) -> None:
        await until(lambda: len(world.log.calls) >= COUNT // 3)
        SlowCommitConsumer.hold_next = True  # the next periodic commit is slow
        await until(lambda: len(world.log.calls) >= COUNT and bool(SlowCommitConsumer.held))
        await world.sigterm("a")  # the shutdown commit, with the slow one still in flight
        await asyncio.sleep(2.5)  # a held-back commit still in flight has landed by now
        after_landing.append(committed(world.log))

    after_landing: list[int] = []
    log = simulate(quiet({"concurrency": 4, "commit_interval": 0.1},
                         inputs=[Input(b"k", str(i).encode()) for i in range(COUNT)],
                         handle=answer(lambda _v: 0.1), script=hold_one_commit,
                         make_consumer=SlowCommitConsumer))
    [held] = SlowCommitConsumer.held
    assert held < COUNT
    assert after_landing == [COUNT], "the committed offset went backwards"
    assert committed_to_end(log)
    assert check(log) == []


def test_a_failed_revoke_commit_is_tried_again_within_the_revoke() -> None:
    """A revoke's commit that fails (a broker briefly away) is tried again while the revoke's
    budget lasts, instead of being logged as "will retry" and forgotten with the partition:
    the next owner then calls nothing this pod already called."""
    log = simulate(quiet({"concurrency": 8, "rebalance_timeout": 4.0}, partitions=2,
                         records=60, produce_over_s=6.0, commit_failure_rate=0.7,
                         events=[(1.5, "join"), (3.0, "rebalance"), (4.5, "leave")]))
    sessions = {(c.wait_id, c.pod, c.generation) for c in log.calls}
    assert len(sessions) == len({c.wait_id for c in log.calls})  # none called twice
    assert check(log) == []
