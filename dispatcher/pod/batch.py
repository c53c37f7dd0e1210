"""The classic batch loop, kept as the baseline the load test compares against.

Poll up to N records, call the counterparty for all of them concurrently (same client, same
DLQ rule), wait for every one, commit, repeat. No wait topic: a crash re-processes the whole
batch, and one slow call holds back the next N records — throughput is N / slowest call.
Like the engine, it fetches again after a fetch fails, and a record the Kafka client cannot
parse gets a reference DLQ record while the others of its batch are read one at a time
(`fetching.read_past_unreadable`, from where each partition's last batch ended).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from dispatcher.call.contract import CallRequest, Counterparty, call_settling_bugs
from dispatcher.clock import monotonic_s
from dispatcher.errors import FatalError, KafkaClientError, ProduceError, UnreadableRecordError
from dispatcher.flow.rate import RateGate
from dispatcher.kafka.seam import (
    AckedWrites,
    Fetched,
    FetchedRecord,
    SourceConsumer,
    TopicPartition,
)
from dispatcher.kafka.topics import TopicConfig
from dispatcher.pod.fetching import (
    read_committed,
    read_past_unreadable,
    read_start_positions,
    unreadable_reference,
)
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.settings import WindowConfig
from dispatcher.pod.settle import OutcomeWriter, source_record
from dispatcher.pod.watermark import PartitionWatermarks, partition_key
from dispatcher.tracing import record_trace
from dispatcher.wire import NULL_VALUE_FAILURE, SourceRecord, idempotency_key_of, wait_id_for

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 200
FETCH_RETRY_S = 0.5  # a fetch that failed (a broker away, a leader moving) is tried again


class BatchEngine:
    """Runs until `stop` is set; the batch in progress is finished and committed first (with
    the ends of earlier batches whose commit failed: tried once more)."""

    def __init__(self, *, consumer: SourceConsumer, writer: AckedWrites,
                 counterparty: Counterparty, topics: TopicConfig, window: WindowConfig,
                 metrics: DispatcherMetrics, rate: RateGate | None = None) -> None:
        self._consumer = consumer
        self._outcomes = OutcomeWriter(writer, topics, metrics)
        self._counterparty = counterparty
        self._topics = topics
        self._window = window
        self._metrics = metrics
        self._in_flight = 0
        self._rate = rate
        # where each partition's next batch starts: a failed fetch has consumed what came
        # before the record it could not parse, so reading past it starts there
        self._positions = PartitionWatermarks()
        # the ends of batches whose commit failed, for partitions still its own: committed
        # again at the next poll, with a next batch or without one
        self._uncommitted: dict[TopicPartition, int] = {}
        # how many times each partition was revoked: a batch fetched before a revoke is not
        # committed for that partition (its client starts again at the committed offset)
        self._revokes: dict[TopicPartition, int] = {}
        metrics.window.set(window.concurrency)

    @property
    def ready(self) -> bool:
        return bool(self._consumer.assignment())

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def run(self, stop: asyncio.Event) -> None:
        self._consumer.subscribe(list(self._topics.input_topics), self)
        while not stop.is_set():
            unreadable: list[tuple[TopicPartition, int, Exception]] = []
            try:
                batch = await self._consumer.getmany(timeout_ms=POLL_TIMEOUT_MS,
                                                     max_records=self._window.concurrency)
            except UnreadableRecordError as exc:  # e.g. a header name that is not UTF-8
                batch = await self._read_past_unreadable(unreadable, exc)
            except KafkaClientError as exc:
                log.warning("fetching failed, trying again in %.1f s: %r", FETCH_RETRY_S, exc)
                await asyncio.sleep(FETCH_RETRY_S)
                continue
            owned = dict(self._revokes)
            records = [source_record(r) for rs in batch.values() for r in rs]
            if not records and not unreadable:
                if self._uncommitted:
                    await self._commit({})
                continue
            self._metrics.fetched.inc(len(records) + len(unreadable))
            self._in_flight = len(records)
            self._metrics.in_flight.set(len(records))
            started = monotonic_s()
            try:
                await asyncio.gather(*(self._process(r) for r in records),
                                     *(self._outcomes.reference(*unreadable_reference(tp, offset,
                                                                                      exc))
                                       for tp, offset, exc in unreadable))
            except ProduceError as exc:  # a write that can never succeed: fatal, as the
                # engine's (exit 3, restarted); the batch stays uncommitted for the next run
                log.critical("cannot write an outcome of the batch: %r; stopping so that the "
                             "pod is restarted (the batch is not committed)", exc)
                raise FatalError(f"stopped: {exc}") from exc
            self._in_flight = 0
            self._metrics.in_flight.set(0)
            ends = {TopicPartition(tp.topic, tp.partition): rs[-1].offset + 1
                    for tp, rs in batch.items() if rs}
            for tp, offset, _exc in unreadable:
                ends[tp] = max(ends.get(tp, 0), offset + 1)
            # A partition revoked while its batch was called is the next owner's (or ours again,
            # from the committed offset, below this batch): committing this batch's end there
            # would move the committed offset back once the batch fetched again commits.
            ends = self._not_revoked_since(owned, ends)
            for tp, end in ends.items():
                self._positions.forget(partition_key(tp))
                self._positions.starts_at(partition_key(tp), end)
            await self._commit(ends)
            elapsed = monotonic_s() - started
            for _ in records:
                self._metrics.record_duration.observe(elapsed)
        if self._uncommitted:  # a commit that failed, not yet tried again: once more, or a
            # clean stop leaves its batches to be called again (`sweep.py --seed 52670`)
            await self._commit({})

    async def _read_past_unreadable(self, unreadable: list[tuple[TopicPartition, int, Exception]],
                                    error: Exception) -> Fetched:
        """The batch read one record at a time from where each partition's last batch ended;
        the offsets of the records the client cannot parse go to `unreadable`. A fetch that
        fails on the way ends the read with what it found: those records are consumed (the
        next fetch goes on after them), so they are this batch's; the fetch is tried again at
        the next poll. A rebalance during the read moves a partition back to its committed
        offset, and the read goes on from there: what was read of it before is the ended
        ownership's (its revoke does not wait for the batch), so the batch keeps only what was
        read since (`sweep.py --seed 7694`: each record read twice was called twice)."""
        batch: dict[TopicPartition, list[FetchedRecord]] = {}
        read_in = dict(self._revokes)  # each partition's revokes when what is kept was read

        def since_the_last_revoke(tp: TopicPartition) -> TopicPartition:
            key = TopicPartition(tp.topic, tp.partition)
            if self._revokes.get(key, 0) != read_in.get(key, 0):
                read_in[key] = self._revokes.get(key, 0)
                batch.pop(key, None)
                unreadable[:] = [u for u in unreadable if u[0] != key]
            return key

        def start(tp: TopicPartition, records: Sequence[FetchedRecord]) -> None:
            batch.setdefault(since_the_last_revoke(tp), []).extend(records)

        def start_unreadable(tp: TopicPartition, offset: int) -> None:
            unreadable.append((since_the_last_revoke(tp), offset, error))

        try:
            await read_past_unreadable(self._consumer, self._positions.expected_next, start,
                                       start_unreadable, limit=self._window.concurrency)
        except KafkaClientError as exc:
            log.warning("fetching failed while reading past an unreadable record; the batch "
                        "is what was read before it, the rest is fetched next poll: %r", exc)
        for tp in {*batch, *(u[0] for u in unreadable)}:  # revoked after its last read too
            since_the_last_revoke(tp)
        return batch

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        """The batch in flight is not waited for (the next owner calls it again; its end is not
        committed for the revoked partitions): only where the partitions' next batches start,
        and the ends of their batches whose commit failed, are forgotten."""
        for tp in revoked:
            key = TopicPartition(tp.topic, tp.partition)
            self._positions.forget(partition_key(tp))
            self._uncommitted.pop(key, None)
            self._revokes[key] = self._revokes.get(key, 0) + 1

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        await read_committed(self._consumer, assigned, self._positions)
        await read_start_positions(self._consumer, assigned, self._positions)

    async def _process(self, source: SourceRecord) -> None:
        """One record: its call and its outcome, traced as the engine traces it (each runs in
        a task of its own under `gather`, so the span is the record's alone)."""
        trace = record_trace(source, self._topics.group)  # NO_TRACE: tracing off
        try:
            if source.value is None:
                await self._outcomes.dead_letter(source, NULL_VALUE_FAILURE)
                return
            if self._rate is not None:
                await self._rate.token()
            wait_id = str(wait_id_for(self._topics.group, source.topic, source.partition,
                                      source.offset))
            trace.calling()
            outcome = await call_settling_bugs(self._counterparty, CallRequest(
                source.value, idempotency_key_of(source.headers, wait_id), source, wait_id))
            trace.called(outcome)
            self._metrics.call_latency.observe(outcome.elapsed_s)
            await self._outcomes.settle(source, wait_id, outcome)
        finally:
            trace.end()

    def _not_revoked_since(self, revokes: dict[TopicPartition, int],
                           offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """`offsets` of the partitions not revoked since `revokes` (the revoke counts then)."""
        return {tp: end for tp, end in offsets.items()
                if self._revokes.get(tp, 0) == revokes.get(tp, 0)}

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit `offsets` with the ends of earlier batches whose commit failed. A commit
        that fails is tried again at the next poll while the partitions stay its own; lost
        mid-batch or mid-commit, they are the next owner's, which processes the batch again."""
        offsets = {**self._uncommitted, **offsets}
        owned = dict(self._revokes)
        try:
            await self._consumer.commit(offsets)
        except KafkaClientError as exc:
            self._metrics.commits.labels("failed").inc()
            # Not a partition revoked while the commit was asked (the rebalance it failed
            # over): the revoke forgot it, and asking for it again would fail every commit.
            self._uncommitted = self._not_revoked_since(owned, offsets)
            log.warning("batch commit failed (tried again at the next poll; the batch is "
                        "redelivered if its partitions move first): %r", exc)
            return
        self._uncommitted = {}
        self._metrics.commits.labels("ok").inc()
