"""The batch baseline (`--mode batch`, `dispatcher/pod/batch.py`) on the simulated Kafka: poll a
batch, call it all, commit. It keeps the promises it makes (committed means called to an
outcome, bad input gets an outcome, the pod lives through what real clusters do); the
seeded sweep draws it too (`world._draw_pod_kind`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from cases import MID_READ_CALLS, answer, committed_to_end, dlq, fetch_failing_mid_read
from oracle import check
from simkafka import ClientFaults, SimCluster, SimConsumer, WriteFaults
from world import INPUT, Input, World, quiet, simulate, until

from dispatcher.errors import FatalError, KafkaClientError
from dispatcher.kafka.seam import Fetched, TopicPartition

BATCH = {"mode": "batch", "concurrency": 4, "circuit_breaker": "off"}


def test_the_batch_baseline_goes_on_past_a_record_the_client_cannot_parse() -> None:
    """A record the Kafka client cannot parse gets a reference DLQ record, and the records
    before and after it are called; the defect: the batch baseline died of it, and a restarted
    pod died again at the same record (found by `sweep.py --faults --seed 69`)."""
    inputs = [Input(b"k%d" % i, b"v%d" % i, unreadable=i in (3, 9)) for i in range(14)]
    log = simulate(quiet(BATCH, inputs=inputs, records=len(inputs)))
    assert [p.error for p in log.pods] == [None]
    assert {c.offset for c in log.calls} == set(range(14)) - {3, 9}
    assert sorted(e.source.offset for e in dlq(log)
                  if e.failure.exception == "UnreadableRecordError") == [3, 9]
    assert check(log) == []


def test_the_batch_baseline_fetches_again_after_a_fetch_fails() -> None:
    """A fetch that fails (a leader moving) is tried again; the defect: the batch baseline
    died of it (found by `sweep.py --faults --seed 9`)."""
    log = simulate(quiet(BATCH, records=40, partitions=2,
                         client_faults=ClientFaults(fetch_error_rate=0.3)))
    assert [p.error for p in log.pods] == [None]
    assert check(log) == []


def test_the_batch_baseline_commits_a_batch_again_after_its_commit_failed() -> None:
    """A batch whose commit failed (the coordinator away, the partitions still its own) is
    committed again at the next poll, even when no next batch comes; the defect: the batch
    baseline gave up on it, and the last batches before the input ran dry stayed uncommitted
    for good (found by `sweep.py --faults --seed 101`)."""
    log = simulate(quiet(BATCH, records=12, partitions=2, commit_failure_rate=0.6))
    assert [p.error for p in log.pods] == [None]
    failed = [a for a in log.cluster.commit_attempts if not a.ok]
    assert failed, "no commit failed: the case did not reach its path"
    assert committed_to_end(log)
    assert check(log) == []


def test_the_batch_baseline_keeps_what_it_read_when_a_fetch_fails_past_an_unreadable_record(
) -> None:
    """A fetch fails (a retriable error the seam passes on) while the batch baseline reads one
    record at a time past a record the client cannot parse. The defect: the pod died of it
    (found by `sweep.py --faults --seed 126`); dropping the batch would be worse, since the
    records read before the failure are consumed and the next fetch goes on after them: the
    batch keeps them, and the fetch is tried again at the next poll."""
    log, consumer = fetch_failing_mid_read(BATCH)
    assert consumer.careful_reads >= 4, "the fetch did not fail during the careful read"
    assert [p.error for p in log.pods] == [None]
    assert check(log) == []
    assert {(c.partition, c.offset) for c in log.calls} == MID_READ_CALLS


class _FirstCommitFails(SimConsumer):
    """The group refuses the first commit (a coordinator moving), then takes every one."""

    commits = 0

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.commits += 1
        if self.commits == 1:
            raise KafkaClientError("RequestTimedOutError (injected: the first commit)")
        await super().commit(offsets)


def test_the_batch_baseline_does_not_commit_a_batch_of_an_ownership_a_rebalance_ended() -> None:
    """A rebalance comes while a batch is called and gives the partition back to the same pod,
    whose client starts it again at the committed offset, below that batch (the commit before
    it failed). The defect: the batch of the ended ownership was committed when it ended, and
    the batch fetched again from the committed offset then committed below it: the committed
    offset went back (found by `sweep.py --faults --seed 970`, and 369, 743, 966, 968). A
    batch's end is committed only for the partitions not revoked since it was fetched."""
    inputs = [Input(b"k%d" % i, b"%d" % i) for i in range(6)]
    consumers: list[_FirstCommitFails] = []

    def consumer(cluster: SimCluster, member: str, max_poll: int) -> SimConsumer:
        consumers.append(_FirstCommitFails(cluster, member, max_poll))
        return consumers[-1]

    async def rebalance_during_the_second_batch(world: World) -> None:
        await until(lambda: any(c.offset == 2 for c in world.log.calls))
        await world.cluster.rebalance([INPUT])

    log = simulate(quiet({**BATCH, "concurrency": 2}, inputs=inputs, records=len(inputs),
                         make_consumer=consumer, script=rebalance_during_the_second_batch,
                         handle=answer(lambda value: 1.0 if value == b"2" else 0.01)))
    assert consumers[0].commits >= 2, "the first commit was not refused"
    assert len(log.cluster.assignments) >= 2, "no rebalance while the batch was called"
    assert [p.error for p in log.pods] == [None]
    assert committed_to_end(log)
    assert check(log) == []


def test_the_batch_baseline_stops_fatally_on_a_write_that_can_never_succeed() -> None:
    """A write that can never succeed (an authorisation refused) stops the batch baseline as
    it stops the engine: `FatalError` (exit 3, the orchestrator restarts it), caused by the
    very write that failed, its batch uncommitted for the next run. The defect: the raw
    `ProduceError` escaped (`waitline dispatch` exit 2, as for bad configuration; found by
    `sweep.py --faults --seed 1113` and `--seed 1204`)."""
    log = simulate(quiet(BATCH, records=12, handle=answer(lambda _v: 0.2),
                         write_faults=WriteFaults(fatal_at=0.1)))
    assert log.pods and all(isinstance(p.error, FatalError) for p in log.pods), [
        p.error for p in log.pods]
    assert check(log) == []


class _CommitHeldOverARebalance(SimConsumer):
    """Its first commit of partition 1 waits, once `hold` is set, until `release` is: a
    rebalance comes between the commit's request and the group's answer."""

    hold = False

    def __init__(self, cluster: SimCluster, member: str, window: int) -> None:
        super().__init__(cluster, member, window)
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self.hold and TopicPartition(INPUT, 1) in offsets:
            self.hold = False
            self.holding.set()
            await self.release.wait()
        await super().commit(offsets)


def test_a_batch_commit_failing_over_a_rebalance_forgets_the_partitions_revoked() -> None:
    """A commit in flight while a rebalance moves one of its partitions away fails (the
    group's generation moved on). The defect: the batch baseline kept that commit's offsets
    to try again, the moved partition's too, though the revoke had just forgotten it, so every
    later commit of the pod asked for a partition it no longer owned and failed, and its own
    partitions were never committed again (`sweep.py --seed 31151`)."""
    async def rebalance_while_the_first_commit_waits(world: World) -> None:
        consumer = world.log.pods[0].consumer
        assert isinstance(consumer, _CommitHeldOverARebalance)
        consumer.hold = True
        await consumer.holding.wait()
        await world.start_pod("b")  # partition 1 moves to b
        await until(lambda: any(a.member.startswith("b") for a in world.cluster.assignments))
        consumer.release.set()

    log = simulate(quiet({**BATCH, "concurrency": 8},
                         inputs=[Input(b"k%d" % i, b"v%d" % i, partition=i % 2)
                                 for i in range(40)], records=40, partitions=2,
                         handle=answer(lambda _v: 0.2), make_consumer=_CommitHeldOverARebalance,
                         script=rebalance_while_the_first_commit_waits))
    first = log.pods[0]
    failed = [a.at for a in log.cluster.commit_attempts if a.member == first.name and not a.ok]
    assert failed, "the held commit did not fail over the rebalance"
    assert any(a.ok for a in log.cluster.commit_attempts
               if a.member == first.name and a.at > failed[0]), \
        "the pod never committed again after the commit that failed over the rebalance"
    assert check(log) == []


class _FetchFailsAfterAFailedCommit(SimConsumer):
    """Its first commit fails (a coordinator moving), and the fetch after it fails too (a
    leader moving): the batch loop waits before fetching again."""

    def __init__(self, cluster: SimCluster, member: str, window: int) -> None:
        super().__init__(cluster, member, window)
        self.failing_commits = 1
        self.fetch_fails = False

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        failing = self.failing_commits > 0
        try:
            await super().commit(offsets)
        finally:
            self.fetch_fails = failing

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int,
                      max_records: int | None = None) -> Fetched:
        if self.fetch_fails:
            self.fetch_fails = False
            raise KafkaClientError("NotLeaderForPartitionError (injected fetch error)")
        return await super().getmany(*partitions, timeout_ms=timeout_ms,
                                     max_records=max_records)


def test_a_stop_tries_once_more_the_commit_that_failed_before_it() -> None:
    """A batch's commit fails, and the stop comes while the loop waits to fetch again (its
    fetch failed too). The defect: the loop ended without trying that commit again, so a
    clean stop left its last batch uncommitted and the next pod called it again
    (`sweep.py --seed 52670`)."""
    async def stop_after_a_failed_commit(world: World) -> None:
        await until(lambda: any(not a.ok for a in world.cluster.commit_attempts))
        await world.sigterm("a")
        await world.start_pod("a")

    log = simulate(quiet({**BATCH, "drain_grace": 2.0},
                         inputs=[Input(b"k%d" % i, b"v%d" % i) for i in range(3)], records=3,
                         handle=answer(lambda _v: 0.1), make_consumer=_FetchFailsAfterAFailedCommit,
                         script=stop_after_a_failed_commit))
    first = log.pods[0]
    assert [a.ok for a in log.cluster.commit_attempts if a.member == first.name] == [False, True]
    assert [c.pod for c in log.calls] == [first.name] * 3
    assert check(log) == []


class _RebalancesMidCarefulRead(SimConsumer):
    """A rebalance of the group (the same pod keeps the partition) during the second of its
    one-record reads past an unreadable record."""

    careful_reads = 0

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int,
                      max_records: int | None = None) -> Fetched:
        if max_records == 1:
            self.careful_reads += 1
            if self.careful_reads == 3:
                await self._cluster.rebalance([INPUT])
        return await super().getmany(*partitions, timeout_ms=timeout_ms,
                                     max_records=max_records)


def test_a_rebalance_during_a_careful_read_leaves_the_records_read_before_it() -> None:
    """The batch baseline reads one record at a time past a record the client cannot parse;
    a rebalance during that read moves the client's position back to the committed offset,
    and the read goes on from there. The defect: the batch kept the records read before the
    rebalance as well as the same records read again after it, and called each of them twice
    in one batch (three times over two rebalances: `sweep.py --seed 7694`). The records read
    before a rebalance are the ended ownership's, which its revoke does not wait for; the
    batch keeps what was read since."""
    inputs = [Input(b"k", b"v%d" % i, unreadable=i == 4) for i in range(6)]
    consumers: list[_RebalancesMidCarefulRead] = []

    def consumer(cluster: SimCluster, member: str, max_poll: int) -> SimConsumer:
        consumers.append(_RebalancesMidCarefulRead(cluster, member, max_poll))
        return consumers[-1]

    log = simulate(quiet({**BATCH, "concurrency": 8}, inputs=inputs, records=len(inputs),
                         make_consumer=consumer))
    assert consumers[0].careful_reads >= 3, "the careful read did not reach the rebalance"
    assert len(log.cluster.assignments) >= 2, "no rebalance during the careful read"
    called = [c.offset for c in log.calls]
    assert sorted(called) == sorted(set(called)), f"called twice: {sorted(called)}"
    assert check(log) == []
