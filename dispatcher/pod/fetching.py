"""Fetching for the engine: fair admission across partitions, reading past a record the Kafka
client cannot parse, and stopping (waiting for a stop, cancelling what is left
after the drain)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence

from dispatcher.errors import KafkaClientError, UnreadableRecordError
from dispatcher.kafka.seam import FetchedRecord, SourceConsumer, TopicPartition
from dispatcher.pod.watermark import PartitionWatermarks, partition_key
from dispatcher.wire import Failure, SourceRecord

log = logging.getLogger(__name__)

SHUTDOWN_LOG_RECORDS = 20  # records named in the shutdown warning; the rest are counted
CAREFUL_WAIT_MS = 1000
CAREFUL_READ_LIMIT = 100  # per partition and pass
UNREADABLE = "UnreadableRecordError"
POSITION_RETRY_S = 0.1
LEAST_SHARE = 16  # records a fair fetch asks of a partition at least (fetch_fairly)


def unreadable_reference(tp: TopicPartition, offset: int,
                         exc: Exception) -> tuple[SourceRecord, Failure]:
    """What the reference DLQ record of an unreadable record names: coordinates only."""
    source = SourceRecord(topic=tp.topic, partition=tp.partition, offset=offset, key=None,
                          value=None, headers=(), timestamp_ms=-1)
    return source, Failure(UNREADABLE, f"the Kafka client cannot parse this record "
                                       f"({exc.__cause__ or exc!r}); "
                                       "read it at its coordinates with another client")


async def read_past_unreadable(
    consumer: SourceConsumer,
    expected_next: Callable[[tuple[str, int]], int | None],
    start: Callable[[TopicPartition, Sequence[FetchedRecord]], None],
    start_unreadable: Callable[[TopicPartition, int], None],
    *, limit: int = CAREFUL_READ_LIMIT, turn: int = 0,
) -> None:
    """The Kafka client cannot parse a fetched record: find it, hand it to `start_unreadable` (which
    gives it a reference DLQ record) and go on past it. Every partition first goes back to
    where the engine expects it (`expected_next`), so nothing fetched is skipped unseen; the
    records read on the way, at most `limit` of them (the window's room), are handed to
    `start` as each is read, partition after partition from partition `turn` (mod their number;
    the caller moves it on, so a backlog in one cannot keep the others from being read). Records
    sharing the unreadable one's batch may be unreadable too; each is found in its turn."""
    log.warning("a fetched record cannot be parsed; reading partitions one record at a time "
                "to find it")
    assignment = sorted(consumer.assignment(), key=partition_key)
    for tp in assignment:
        expected = expected_next(partition_key(tp))
        if expected is not None:
            consumer.seek(tp, expected)
    first = turn % len(assignment) if assignment else 0
    left = min(limit, CAREFUL_READ_LIMIT)
    for tp in assignment[first:] + assignment[:first]:
        if left <= 0:
            break  # the rest stays where it was sought to: the next poll reads on
        read, unreadable = await read_carefully(consumer, tp, left, start)
        left -= read + (unreadable is not None)
        if unreadable is not None:
            start_unreadable(tp, unreadable)
            consumer.seek(tp, unreadable + 1)


async def read_carefully(consumer: SourceConsumer, tp: TopicPartition, limit: int,
                         start: Callable[[TopicPartition, Sequence[FetchedRecord]], None],
                         ) -> tuple[int, int | None]:
    """Read `tp` one record at a time from its position, handing each to `start` as it comes:
    how many were read (at most `limit`), and the offset of an unreadable record when one is
    met (the caller seeks past it).

    Each record is started before the next read, not gathered: a rebalance during a read
    moves the client's position back to the committed offset, and the records read before it
    belong to the ownership it revoked (whose revoke must see them), not to the next.
    A failed `getmany` has consumed, but not returned, the records before the unreadable one,
    so the caller first seeks every partition back to where it expects it."""
    read = 0
    while read < limit:
        try:
            got = await consumer.getmany(tp, timeout_ms=CAREFUL_WAIT_MS, max_records=1)
        except UnreadableRecordError:
            try:
                position: int = await consumer.position(tp)  # after the last one read
            except KafkaClientError as exc:  # found next time, from where these end
                log.warning("%s/%d: cannot read its position (%r); reading on later",
                            tp.topic, tp.partition, exc)
                return read, None
            return read, position
        records = got.get(tp, [])
        if not records:
            break
        start(tp, records)
        read += len(records)
    return read, None


async def fetch_fairly(consumer: SourceConsumer, free: int, turn: int, timeout_ms: int, *,
                       start: Callable[[TopicPartition, Sequence[FetchedRecord]], None],
                       held: Callable[[TopicPartition], int] | None = None) -> None:
    """Up to `free` records, shared across the assigned partitions in turn, each fetch's
    handed to `start` before the next await: a revoke can begin between two `getmany` calls,
    and must see what was fetched before it (`sweep.py --seed 29317`: gathered and started
    after it, those records were called after the revoke's commit, and again by the next
    owner).

    aiokafka's `getmany` drains one partition's fetched buffer (up to max_partition_fetch_bytes
    of records) before another's, so a backlog in one partition would hold back the others.
    Each partition is asked for its share first (without waiting), starting at partition
    `turn` (mod their number; the caller moves it on each time) or, given `held`, those
    holding the fewest records in the window not yet called first and among equals from
    `turn`; what is left goes to any partition, waiting up to `timeout_ms` when nothing was
    found. A share is at least
    `LEAST_SHARE` records (or all of `free`): a small room is then asked of one partition, not
    one record of each (a `getmany` costs about as much as a record's own bookkeeping), and
    the partitions still take turns, fetch after fetch.

    The fewest first, under `--ordering` (the engine passes `held` then): records waiting
    behind a busy key keep their slots, so a partition fetched more than its records can be
    called fills the window, and by turns alone another partition's keys were fed one fetch in
    eight and ran dry (BENCHMARKS.md, "The pod beside prosody-events"). Unordered, a record
    waits only for a call slot, and turns alone are fair."""
    partitions = sorted(consumer.assignment(), key=partition_key)
    if len(partitions) <= 1:
        for part, records in (await consumer.getmany(timeout_ms=timeout_ms,
                                                     max_records=free)).items():
            start(part, records)
        return
    first = turn % len(partitions)
    share = max(-(-free // len(partitions)), LEAST_SHARE)
    left = free
    try:
        in_turn = partitions[first:] + partitions[:first]
        for tp in in_turn if held is None else sorted(in_turn, key=held):
            if left <= 0:
                break
            for part, records in (await consumer.getmany(tp, timeout_ms=0,
                                                 max_records=min(share, left))).items():
                start(part, records)
                left -= len(records)
        if left > 0:
            rest = await consumer.getmany(timeout_ms=0 if left < free else timeout_ms,
                                          max_records=left)
            for part, records in rest.items():
                start(part, records)
    except (KafkaClientError, UnreadableRecordError):
        if left == free:
            raise
        # What was fetched is consumed, and started; the error shows again next poll.


async def cancel_left_over(tasks: Collection[asyncio.Task[None]]) -> None:
    """Cancel the record tasks still running after the drain grace, naming them in a warning
    (each task is named by its record's coordinates)."""
    if not tasks:
        return
    names = sorted(task.get_name() for task in tasks)
    more = len(names) - SHUTDOWN_LOG_RECORDS
    log.warning("%d records still in flight at shutdown (%s%s): their wait records stay open in "
                "the registry; the reconciliation job sends them to the DLQ after they expire",
                len(names), ", ".join(names[:SHUTDOWN_LOG_RECORDS]),
                f", and {more} more" if more > 0 else "")
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def first_set(*events: asyncio.Event) -> None:
    """Return once any of `events` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def read_start_positions(consumer: SourceConsumer, assigned: list[TopicPartition],
                               watermarks: PartitionWatermarks, tries: int = 10) -> None:
    """Note where each assigned partition with no committed offset starts (its reset position):
    a fetch that fails on a record the client cannot parse has consumed the records before it,
    and reading past it goes back there (`read_past_unreadable`)."""
    for tp in assigned:
        if watermarks.expected_next(partition_key(tp)) is not None:
            continue
        for attempt in range(tries):
            try:
                watermarks.starts_at(partition_key(tp), await consumer.position(tp))
                break
            except KafkaClientError as exc:
                if attempt == tries - 1:
                    log.warning("%s/%d: cannot read its position (%r); going on without it",
                                tp.topic, tp.partition, exc)
                else:
                    await asyncio.sleep(POSITION_RETRY_S)


async def read_committed(consumer: SourceConsumer, assigned: list[TopicPartition],
                         watermarks: PartitionWatermarks) -> None:
    """Tell the watermarks the assigned partitions' committed offsets (only an optimisation
    depends on it: not committing the same offset again, so a failed read is logged)."""
    for tp in assigned:
        try:
            committed = await consumer.committed(tp)
        except KafkaClientError as exc:
            log.warning("%s/%d: cannot read its committed offset (%r); going on without it",
                        tp.topic, tp.partition, exc)
            continue
        if committed is not None:
            watermarks.mark_committed(partition_key(tp), committed)
