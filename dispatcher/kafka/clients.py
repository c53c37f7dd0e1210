"""The Kafka seam on aiokafka: the consumer behind `SourceConsumer` (`KafkaSource`), acknowledged
writes with retries behind `AckedWrites` (`AckedWriter`), and the client factories.

`AckedWriter.write` returns only once the broker has acknowledged the record (acks=all,
idempotent producer). Retriable broker errors are retried with capped exponential backoff for as
long as it takes (a record must never be dropped because the broker was briefly away); a
non-retriable error (authorisation, a fenced or out-of-sequence producer) is raised as
`ProduceError`.

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as ClientPartition
from aiokafka.errors import (
    CorruptRecordException,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
)
from aiokafka.errors import RecordTooLargeError as ClientRecordTooLargeError
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from tenacity import AsyncRetrying, retry_if_exception, wait_random_exponential

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
_SIZE_ERRORS = (MessageSizeTooLargeError, RecordListTooLargeError, ClientRecordTooLargeError)
Header = tuple[str, bytes | None]


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaTimeoutError) or (
        isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))
    )


def _log_retry(state: Any) -> None:
    log.warning("Kafka write failed, retrying: %r (attempt %d)",
                state.outcome.exception(), state.attempt_number)


class AckedWriter:
    """Writes records one by one, each awaited until acknowledged; shared by all in-flight
    records (aiokafka batches concurrent sends into the same requests).

    `topic_limits` maps topic names to their `max.message.bytes`; other topics are limited by
    the producer's `max_request_size` only."""

    def __init__(self, producer: AIOKafkaProducer, backoff_max_s: float = 5.0,
                 topic_limits: Mapping[str, int] | None = None) -> None:
        self._producer = producer
        self._backoff_max_s = backoff_max_s
        self._limits = dict(topic_limits or {})

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        """Write `record` (to `partition`, or where the default partitioner puts it) and wait
        for its acknowledgement; the partition it was written to."""
        headers = [(name, value) for name, value in record.headers]
        self._check_size(topic, record.key, record.value, headers)
        try:  # the common case, without the retry machinery's cost per record
            return await self._send(topic, record.key, record.value, headers, partition)
        except KafkaError as exc:
            if not _retriable(exc):
                raise _produce_error(topic, exc) from exc
            log.warning("Kafka write to %s failed, retrying: %r", topic, exc)
            return await self._write_with_retries(topic, record.key, record.value, headers,
                                                  partition)

    def _check_size(self, topic: str, key: bytes | None, value: bytes | None,
                    headers: list[Header]) -> None:
        limit = self._limits.get(topic)
        if limit is None:
            return
        payload = len(key or b"") + len(value or b"")
        if payload + 4096 + sum(len(n) + len(v or b"") for n, v in headers) * 2 < limit:
            return  # clearly small enough: skip the exact estimate on the hot path
        size = BATCH_OVERHEAD_BYTES + DefaultRecordBatchBuilder.estimate_size_in_bytes(
            key, value, headers)
        if size > limit:
            raise RecordTooLargeError(f"a record of {size} bytes exceeds {topic}'s "
                                      f"max.message.bytes ({limit}); it was not written")

    async def _send(self, topic: str, key: bytes | None, value: bytes | None,
                    headers: list[Header], partition: int | None) -> int:
        if key is not None or value is not None:
            written = await self._producer.send_and_wait(topic, value, key=key,
                                                         partition=partition, headers=headers)
            return int(written.partition)
        return await send_null_key_and_value(self._producer, topic, headers, partition)

    async def _write_with_retries(self, topic: str, key: bytes | None, value: bytes | None,
                                  headers: list[Header], partition: int | None) -> int:
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retriable),
            wait=wait_random_exponential(multiplier=0.1, max=self._backoff_max_s),
            before_sleep=_log_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._send(topic, key, value, headers, partition)
        except KafkaError as exc:
            raise _produce_error(topic, exc) from exc
        raise AssertionError("unreachable: tenacity re-raises the last error")


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


def make_producer(kafka: KafkaConfig, **overrides: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        **kafka.client_options(),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 0,  # measured: 2 ms of linger doubles the ack wait at small windows
        "max_request_size": MAX_RECORD_BYTES,
        "request_timeout_ms": 30_000,
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
                       timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """Stop a client during shutdown; a failure to stop is logged, not raised.

    Bounded: a consumer's close waits for a group rebalance in progress to complete, which
    another member can hold for its whole rebalance timeout; a stopping pod does not wait that
    long (the group drops this member when its session times out)."""
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
