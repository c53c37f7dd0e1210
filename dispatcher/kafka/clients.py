"""The Kafka seam on aiokafka: the consumer behind `SourceConsumer` (`KafkaSource`), acknowledged
writes with retries behind `AckedWrites` (`AckedWriter`), and the client factories.

`AckedWriter.write` returns only once the broker has acknowledged the record (acks=all,
idempotent producer). Retriable broker errors are retried with capped exponential backoff for as
long as it takes (a record must never be dropped because the broker was briefly away); a
non-retriable error (authorisation, a fenced producer) is raised as `ProduceError`.

A producer out of sequence is replaced: when a partition has had no leader for longer than the
request timeout (a broker restart), aiokafka expires a batch it already numbered, and every
later write to that partition is refused with `OutOfOrderSequenceNumber` (aiokafka#1017). The
writer then starts a new producer (a new producer id, whose sequences start over) and writes
the refused records again; they were never acknowledged, so nothing is lost. A few
replacements in a row with no write acknowledged between them raise `ProduceError`.

A record larger than its topic's `max.message.bytes` raises `RecordTooLargeError` before it is
sent: a batch the broker rejects for its size leaves aiokafka's idempotent producer out of
sequence for that partition (every later write to it fails), so the size is checked here.
A record with neither key nor value (other clients write them; aiokafka's `send` refuses
them) is written through the batch API, byte for byte.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as ClientPartition
from aiokafka.errors import (
    CorruptRecordException,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordListTooLargeError,
    UnknownProducerId,
)
from aiokafka.errors import RecordTooLargeError as ClientRecordTooLargeError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from dispatcher.errors import (
    KafkaClientError,
    ProduceError,
    RecordTooLargeError,
    UnreadableRecordError,
)
from dispatcher.kafka.config import MAX_RECORD_BYTES, KafkaConfig
from dispatcher.kafka.seam import Fetched, RebalanceHandler, TopicPartition
from dispatcher.wire import OutgoingRecord
from dispatcher.wire.commits import commit_metadata

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 10.0
BATCH_OVERHEAD_BYTES = 61  # a record batch's header, counted against max.message.bytes
# aiokafka's default batch is 16 KiB: with thousands of writes in flight, every send that finds
# its partition's batch full waits for the drain and retries, so CPU per record grew with the
# window (docs/BENCHMARKS.md, "Producer batches"). With linger 0 a batch is only as large as
# the writes waiting for it, so a small window is unaffected.
PRODUCER_BATCH_BYTES = 1024 * 1024
# How long a produce request may wait for its answer; also how long aiokafka lets a batch wait
# for a partition without a leader before it fails it (and burns its sequence: AckedWriter).
REQUEST_TIMEOUT_MS = 30_000
# Producers replaced in a row, with no write acknowledged by the newest between them, before a
# write out of sequence is fatal: a new producer that is refused before its first write
# succeeds is not the lost sequence of an outage but a cluster that refuses this writer.
RENEWALS_IN_A_ROW = 3
_SIZE_ERRORS = (MessageSizeTooLargeError, RecordListTooLargeError, ClientRecordTooLargeError)
Header = tuple[str, bytes | None]


def _outcome_unread(delivered: asyncio.Future[Any]) -> None:
    """A write nobody waits for: its failure is not "never retrieved"."""
    if not delivered.cancelled():
        delivered.exception()


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaTimeoutError) or (
        isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))
    )


def _out_of_sequence(exc: BaseException) -> bool:
    """The producer's sequence for a partition is lost (or the broker forgot its producer id):
    every later write of this producer to that partition would be refused; a new one's would
    not."""
    return isinstance(exc, OutOfOrderSequenceNumber | UnknownProducerId)


def _backoff_s(attempt: int, max_s: float) -> float:
    """Full-jitter exponential backoff after `attempt` failed attempts: uniform in
    [0, min(max_s, 0.1 * 2**attempt)] (twice the ceiling of tenacity's
    `wait_random_exponential(multiplier=0.1)` at the same attempt, which this replaced here:
    the loop decides between a backoff and a new producer per failure)."""
    return random.uniform(0.0, min(max_s, 0.1 * 2.0 ** min(attempt, 64)))


class AckedWriter:
    """Writes records one by one, each awaited until acknowledged; shared by all in-flight
    records (aiokafka batches concurrent sends into the same requests).

    `topic_limits` maps topic names to their `max.message.bytes`; other topics are limited by
    the producer's `max_request_size` only. `renew` makes a new (unstarted) producer to replace
    one out of sequence; without it, a write out of sequence raises `ProduceError`. The writer
    owns the producers it starts; `close` stops the current one and those it replaced."""

    def __init__(self, producer: AIOKafkaProducer, backoff_max_s: float = 5.0,
                 topic_limits: Mapping[str, int] | None = None,
                 renew: Callable[[], AIOKafkaProducer] | None = None) -> None:
        self._producer = producer
        self._backoff_max_s = backoff_max_s
        self._limits = dict(topic_limits or {})
        self._renew_with = renew
        self._renewing = asyncio.Lock()
        self._renewals = 0  # in a row: none of the newest producer's writes acknowledged yet
        self._retiring: set[asyncio.Task[None]] = set()

    @property
    def producer(self) -> AIOKafkaProducer:
        """The producer writes go to now."""
        return self._producer

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        """Write `record` (to `partition`, or where the default partitioner puts it) and wait
        for its acknowledgement; the partition it was written to."""
        headers = list(record.headers)  # aiokafka's type; the pairs are tuples already
        self._check_size(topic, record.key, record.value, headers)
        attempt = 0
        while True:
            producer = self._producer
            try:
                if record.key is None and record.value is None:  # aiokafka's `send` refuses it
                    written = await send_null_key_and_value(producer, topic, headers, partition)
                else:  # `send`, then its delivery, here: the stack the acknowledgement resumes
                    # has no frame of a helper (nor of `send_and_wait`) above this one
                    delivered = await producer.send(topic, record.value, key=record.key,
                                                    partition=partition, headers=headers)
                    written = int((await delivered).partition)
            except KafkaError as exc:
                attempt += 1
                await self._before_writing_again(topic, producer, exc, attempt)
                continue
            if self._renewals and producer is self._producer:
                self._renewals = 0
            return written

    async def send_behind(self, topic: str, record: OutgoingRecord) -> None:
        """Queue `record` behind the writes sent before it (aiokafka delivers what it holds as
        it stops: a cancelled wait does not take a write out of its batch,
        tests/integration/test_cut_writes.py); its outcome is not waited for."""
        try:
            delivered = await self._producer.send(topic, record.value, key=record.key,
                                                  headers=list(record.headers))
        except KafkaError as exc:
            log.warning("could not send a record behind the writes cut off to %s: %r",
                        topic, exc)
            return
        delivered.add_done_callback(_outcome_unread)

    async def _before_writing_again(self, topic: str, producer: AIOKafkaProducer,
                                    failure: KafkaError, attempt: int) -> None:
        """After `producer` failed a write with `failure`: nothing if a new producer already
        replaced it, a new one if it is out of sequence, a backoff if the error is retriable;
        else `ProduceError`."""
        if producer is not self._producer:
            return  # replaced while this write was on it (refused, or closed): the new one
        if _out_of_sequence(failure) and self._renew_with is not None:
            await self._renew(producer, self._renew_with, topic, failure)
        elif _retriable(failure):
            log.warning("Kafka write failed, retrying: %r (writing to %s, attempt %d)",
                        failure, topic, attempt)
            await asyncio.sleep(_backoff_s(attempt, self._backoff_max_s))
        else:
            raise _produce_error(topic, failure) from failure

    def _check_size(self, topic: str, key: bytes | None, value: bytes | None,
                    headers: list[Header]) -> None:
        limit = self._limits.get(topic)
        if limit is None:
            return
        bound = len(key or b"") + len(value or b"") + 4096
        for name, header_value in headers:  # a loop: a generator's frame costs more per record
            bound += 2 * (len(name) + len(header_value or b""))
        if bound < limit:
            return  # clearly small enough: skip the exact estimate on the hot path
        size = BATCH_OVERHEAD_BYTES + DefaultRecordBatchBuilder.estimate_size_in_bytes(
            key, value, headers)
        if size > limit:
            raise RecordTooLargeError(f"a record of {size} bytes exceeds {topic}'s "
                                      f"max.message.bytes ({limit}); it was not written")

    async def _renew(self, broken: AIOKafkaProducer, renew: Callable[[], AIOKafkaProducer],
                     topic: str, failure: KafkaError) -> None:
        """Replace `broken` with a new producer, once however many writes it failed at once:
        the new one is started before the writes move to it, and the old one is stopped in the
        background (its writes still in flight finish or fail first; a failed one moves on)."""
        async with self._renewing:
            if broken is not self._producer:
                return  # another write replaced it while this one waited
            if self._renewals >= RENEWALS_IN_A_ROW:
                raise ProduceError(
                    f"writing to {topic} failed: {failure!r}, on each of the "
                    f"{RENEWALS_IN_A_ROW} new producers started since without one write "
                    f"acknowledged")
            self._renewals += 1
            log.warning("the Kafka producer is out of sequence (%r, writing to %s; aiokafka "
                        "expires a batch a partition without a leader held over its request "
                        "timeout): starting a new producer (%d of %d in a row) and writing "
                        "its refused records again", failure, topic, self._renewals,
                        RENEWALS_IN_A_ROW)
            fresh = await _start_new(renew, topic, self._backoff_max_s)
            self._producer = fresh
            self._retire(broken)
            log.info("the new Kafka producer has started; writes go to it")

    def _retire(self, producer: AIOKafkaProducer) -> None:
        task = asyncio.create_task(stop_quietly(producer, timeout_s=None),
                                   name="waitline-producer-retire")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop the current producer and wait (bounded) for the ones it replaced to stop."""
        await stop_quietly(self._producer, timeout_s)
        if self._retiring:
            _, pending = await asyncio.wait(self._retiring, timeout=timeout_s)
            for task in pending:
                log.warning("a replaced Kafka producer did not close within %.0f s; going on "
                            "without it", timeout_s)
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


async def _start_new(renew: Callable[[], AIOKafkaProducer], topic: str,
                     backoff_max_s: float) -> AIOKafkaProducer:
    """A new producer from `renew`, started: tried again with backoff while the cluster is away
    (as a write is); one it refuses for good raises `ProduceError`."""
    attempt = 0
    while True:
        attempt += 1
        fresh = renew()
        try:
            await fresh.start()
        except KafkaError as exc:
            await stop_quietly(fresh)
            if not _retriable(exc):
                raise _produce_error(topic, exc) from exc
            log.warning("starting a new Kafka producer failed, retrying: %r (attempt %d)",
                        exc, attempt)
            await asyncio.sleep(_backoff_s(attempt, backoff_max_s))
            continue
        except BaseException:
            await stop_quietly(fresh)
            raise
        return fresh


def _produce_error(topic: str, exc: KafkaError) -> ProduceError:
    if isinstance(exc, _SIZE_ERRORS):
        return RecordTooLargeError(f"writing to {topic} failed: {exc!r}")
    return ProduceError(f"writing to {topic} failed: {exc!r}")


async def send_null_key_and_value(producer: AIOKafkaProducer, topic: str,
                                  headers: list[Header], partition: int | None = None) -> int:
    """Write a record with a null key and a null value (aiokafka's `send` asserts against it)
    to `partition`, or a random one as the default partitioner would; wait for its
    acknowledgement and return the partition."""
    if partition is None:
        partition = random.choice(sorted(await producer.partitions_for(topic)))
    batch = producer.create_batch()
    batch.append(key=None, value=None, timestamp=None, headers=headers)
    batch.close()
    delivered = await producer.send_batch(batch, topic, partition=partition)
    await delivered
    return partition


def producer_batch_bytes(topic_limits: Mapping[str, int]) -> int:
    """The producer's batch size: `PRODUCER_BATCH_BYTES`, or less if a written topic's
    `max.message.bytes` is smaller (the broker rejects a whole batch over the limit, and with it
    every record in the batch)."""
    return min([PRODUCER_BATCH_BYTES, *topic_limits.values()])


def durable_writes() -> dict[str, Any]:
    """The producer settings of every writer whose records must be neither lost nor written
    twice by a retry: the pod (prepares, outcomes, tombstones), the DLQ replay and the console's
    redrive, the expiry sweep (aiokafka, and Spark's sink through
    `spark_jobs.kafka_options.spark_producer_options`). Every in-sync replica acknowledges
    (acks=all: on a cluster with min.insync.replicas=2 a write survives a broker's loss), the
    idempotent producer writes a retried batch once, and records up to MAX_RECORD_BYTES go."""
    return {"acks": "all", "enable_idempotence": True, "max_request_size": MAX_RECORD_BYTES}


DURABILITY = frozenset({"acks", "enable_idempotence"})  # what no writer may override


def make_producer(kafka: KafkaConfig, **overrides: Any) -> AIOKafkaProducer:
    """An aiokafka producer with `durable_writes` and the pod's tuning; `overrides` tune it
    (linger, batch size, a transactional id) but may not weaken its durability."""
    weakened = DURABILITY & overrides.keys()
    if weakened:
        raise ValueError(f"a writer's {', '.join(sorted(weakened))} is durable_writes()'s")
    options: dict[str, Any] = {
        **kafka.client_options(),
        **durable_writes(),
        "linger_ms": 0,  # measured: 2 ms of linger doubles the ack wait at small windows
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
    }
    options.update(overrides)
    return AIOKafkaProducer(**options)


# What one fetch may bring: Kafka's defaults per partition, a few partitions' worth per request.
# A record larger than this still arrives (the broker sends a first batch whole, whatever its
# size); the limits only bound how much a fetch buffers ahead of the window. Sized to the
# largest record (8 / 32 MiB), two of four runs of a pod at N = 5000 behind a 300,000-record
# backlog grew to 714-770 MB RSS; none of three with these passed 311 MB (docs/BENCHMARKS.md,
# "Fetch buffers").
PARTITION_FETCH_BYTES = 1024 * 1024
FETCH_BYTES = 4 * PARTITION_FETCH_BYTES


def make_consumer(kafka: KafkaConfig, group: str, **overrides: Any) -> AIOKafkaConsumer:
    options: dict[str, Any] = {
        **kafka.client_options(),
        "group_id": group,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "max_partition_fetch_bytes": PARTITION_FETCH_BYTES,
        "fetch_max_bytes": FETCH_BYTES,
    }
    options.update(overrides)
    return AIOKafkaConsumer(**options)


async def stop_quietly(client: AIOKafkaConsumer | AIOKafkaProducer,
                       timeout_s: float | None = CLOSE_TIMEOUT_S) -> None:
    """Stop a client during shutdown; a failure to stop is logged, not raised.

    Bounded: a consumer's close waits for a group rebalance in progress to complete, which
    another member can hold for its whole rebalance timeout; a stopping pod does not wait that
    long (the group drops this member when its session times out). `None`: as long as it
    takes (a replaced producer, stopped in the background while its last writes end)."""
    try:
        async with asyncio.timeout(timeout_s):
            await client.stop()
    except TimeoutError:
        log.warning("%s did not close within %.0f s (a group rebalance in progress?); going on "
                    "without it", type(client).__name__, timeout_s)
    except (KafkaError, OSError) as exc:
        log.warning("stopping %s failed: %r", type(client).__name__, exc)


_UNREADABLE = (UnicodeDecodeError, CorruptRecordException)
"""What aiokafka raises from `getmany` for a record it cannot parse (a header name that is not
UTF-8, a corrupt batch): raised again on every poll, since the position stays before it."""


def _client_partition(tp: TopicPartition) -> ClientPartition:
    return tp if type(tp) is ClientPartition else ClientPartition(tp.topic, tp.partition)


class KafkaSource:
    """The seam's `SourceConsumer` on an aiokafka consumer (which the caller starts and stops).

    aiokafka's partitions are named tuples equal to the seam's, so what it returns is passed on
    as it is; only what goes in is converted, and its errors are translated at this edge."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer

    def subscribe(self, topics: Sequence[str], handler: RebalanceHandler | None = None) -> None:
        self._consumer.subscribe(list(topics),
                                 listener=None if handler is None else _Listener(handler))

    def assignment(self) -> set[TopicPartition]:
        return set(self._consumer.assignment())

    def member_id(self) -> str | None:
        """The member id the group coordinator gave this consumer (None before it joined);
        aiokafka keeps it on its coordinator, with no public accessor."""
        coordinator = getattr(self._consumer, "_coordinator", None)
        member = getattr(coordinator, "member_id", None)
        return member if isinstance(member, str) and member else None

    def group_generation(self) -> int | None:
        # aiokafka keeps the generation on its coordinator and sets it from the JoinGroup
        # response before the listener hears of the assignment; it has no public accessor.
        coordinator = getattr(self._consumer, "_coordinator", None)
        generation = getattr(coordinator, "generation", None)
        return generation if isinstance(generation, int) and generation >= 0 else None

    def paused(self) -> set[TopicPartition]:
        return set(self._consumer.paused())

    def pause(self, *partitions: TopicPartition) -> None:
        try:
            self._consumer.pause(*map(_client_partition, partitions))
        except KafkaError as exc:  # e.g. a partition no longer assigned
            raise KafkaClientError(f"cannot pause: {exc!r}") from exc

    def resume(self, *partitions: TopicPartition) -> None:
        self._consumer.resume(*map(_client_partition, partitions))

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int,
                      max_records: int | None = None) -> Fetched:
        try:
            fetched: Fetched = await self._consumer.getmany(
                *map(_client_partition, partitions), timeout_ms=timeout_ms,
                max_records=max_records)
        except _UNREADABLE as exc:
            raise UnreadableRecordError(repr(exc)) from exc
        except KafkaError as exc:
            if exc.retriable:  # a broker away, a leader moving: the engine fetches again
                raise KafkaClientError(f"fetch failed: {exc!r}") from exc
            raise
        return fetched

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._consumer.seek(_client_partition(partition), offset)

    async def position(self, partition: TopicPartition) -> int:
        try:
            position: int = await self._consumer.position(_client_partition(partition))
        except KafkaError as exc:
            raise KafkaClientError(f"cannot read the position: {exc!r}") from exc
        return position

    async def committed(self, partition: TopicPartition) -> int | None:
        try:
            committed: int | None = await self._consumer.committed(_client_partition(partition))
        except KafkaError as exc:
            raise KafkaClientError(f"cannot read the committed offset: {exc!r}") from exc
        return committed

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        # Each offset carries the commit's time: OffsetFetch returns no commit time, and the
        # console tells from it how long ago each partition committed (wire/commits.py).
        metadata = commit_metadata(int(time.time() * 1000))
        try:
            await self._consumer.commit({_client_partition(tp): (offset, metadata)
                                         for tp, offset in offsets.items()})
        except KafkaError as exc:
            raise KafkaClientError(f"offset commit failed: {exc!r}") from exc

    def highwater(self, partition: TopicPartition) -> int | None:
        highwater: int | None = self._consumer.highwater(_client_partition(partition))
        return highwater


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance listener, handing the partitions to the seam's handler as lists."""

    def __init__(self, handler: RebalanceHandler) -> None:
        self._handler = handler

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._handler.on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._handler.on_assigned(list(assigned))
