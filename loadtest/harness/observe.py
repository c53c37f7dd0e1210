"""What the crash demo reads from outside the pod: Kafka's topics and committed offsets, and
the mock counterparty's calls per Idempotency-Key. Feeds `loadtest.harness.accounting`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from connectors.rows import WaitEvent, open_waits
from dispatcher.wire import parse_dlq_record, parse_wait_record, wait_id_for
from loadtest.harness.accounting import Coordinates
from loadtest.harness.clients import KafkaTarget, client_options
from loadtest.harness.processes import HarnessError

READ_BATCH_TIMEOUT_MS = 1000
COORDINATOR_WAIT_S = 30.0


@dataclass(frozen=True)
class WaitTopicState:
    seen: frozenset[uuid.UUID]  # wait ids with any wait record
    closed: frozenset[uuid.UUID]  # wait ids the registry would not hold open

    @property
    def open(self) -> frozenset[uuid.UUID]:
        return self.seen - self.closed


async def topic_partitions(kafka: KafkaTarget, topic: str) -> list[TopicPartition]:
    """`topic`'s partitions, asked of the cluster (a client's cached metadata may predate it);
    empty when the topic does not exist."""
    admin = AIOKafkaAdminClient(**client_options(kafka))
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(TopicPartition(topic, p["partition"])
                  for t in described if t["error_code"] == 0 for p in t["partitions"])


async def _read_to_end(kafka: KafkaTarget, topic: str,
                       each: Callable[[ConsumerRecord[bytes, bytes]], None]) -> None:
    """Every record of `topic` up to its end now, partition by partition in offset order."""
    partitions = await topic_partitions(kafka, topic)
    if not partitions:
        return
    consumer = AIOKafkaConsumer(**client_options(kafka), enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        pending = {tp for tp in partitions if await consumer.position(tp) < ends[tp]}
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=READ_BATCH_TIMEOUT_MS)
            for tp, records in batches.items():
                for record in records:
                    if record.offset < ends[tp]:
                        each(record)
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
    finally:
        await consumer.stop()


async def read_wait_topic(kafka: KafkaTarget, topic: str) -> WaitTopicState:
    """Every wait id of `topic`, and those the registry would close, by its rules (a late
    prepare of an earlier owner, a withdrawal: connectors/rows.py)."""
    records: list[ConsumerRecord[bytes, bytes]] = []

    def add(record: ConsumerRecord[bytes, bytes]) -> None:
        parse_wait_record(record.key, record.value, tuple(record.headers))  # ours, strictly
        records.append(record)

    await _read_to_end(kafka, topic, add)
    seen = frozenset(uuid.UUID((r.key or b"").decode()) for r in records)
    return WaitTopicState(seen, seen - registry_open(records, topic))


def registry_open(records: Sequence[ConsumerRecord[bytes, bytes]],
                  topic: str) -> set[uuid.UUID]:
    """The wait ids the registry would hold open after mirroring `records`, `topic`'s records
    in log order (connectors.rows.open_waits)."""
    rows, rejects = open_waits(
        (WaitEvent(r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers),
                   r.timestamp) for r in records), dlq_topic=f"{topic}.dlq", group=None)
    if rejects:  # e.g. a wait topic not named <group>.wait: nothing would look open
        raise HarnessError(f"{topic}: the registry would reject {len(rejects)} wait records, "
                           f"the first: {rejects[0].reason}")
    return set(rows)


async def read_dlq_exceptions(kafka: KafkaTarget, topic: str,
                              group: str) -> dict[uuid.UUID, list[str]]:
    """Wait id -> the exception of each of its DLQ records (the id rebuilt from the original's
    coordinates where a record does not carry it)."""
    found: dict[uuid.UUID, list[str]] = {}

    def add(record: ConsumerRecord[bytes, bytes]) -> None:
        entry = parse_dlq_record(record.key, record.value, tuple(record.headers))
        source = entry.source
        wait_id = entry.wait_id or wait_id_for(group, source.topic, source.partition,
                                               source.offset)
        found.setdefault(wait_id, []).append(entry.failure.exception)

    await _read_to_end(kafka, topic, add)
    return found


async def input_records(kafka: KafkaTarget, group: str, topic: str) -> dict[uuid.UUID, Coordinates]:
    """Every record of the input topic, by the wait id `group` gives it."""
    partitions = await topic_partitions(kafka, topic)
    consumer = AIOKafkaConsumer(**client_options(kafka), enable_auto_commit=False)
    await consumer.start()
    try:
        starts = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    return {wait_id_for(group, topic, tp.partition, offset): Coordinates(tp.partition, offset)
            for tp in partitions for offset in range(starts[tp], ends[tp])}


async def end_offsets(kafka: KafkaTarget, topic: str) -> dict[int, int]:
    """`topic`'s end offset per partition (empty when the topic does not exist)."""
    partitions = await topic_partitions(kafka, topic)
    if not partitions:
        return {}
    consumer = AIOKafkaConsumer(**client_options(kafka))
    await consumer.start()
    try:
        return {tp.partition: offset
                for tp, offset in (await consumer.end_offsets(partitions)).items()}
    finally:
        await consumer.stop()


async def committed_offsets(kafka: KafkaTarget, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition of `topic` (absent where none). A retriable
    error (the group's coordinator not yet elected, or moving to another broker) is asked again
    for up to COORDINATOR_WAIT_S."""
    admin = AIOKafkaAdminClient(**client_options(kafka))
    await admin.start()
    try:
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        while True:
            try:
                offsets = await admin.list_consumer_group_offsets(group)
                break
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items()
            if tp.topic == topic and meta.offset >= 0}


async def fully_committed(kafka: KafkaTarget, group: str, topic: str) -> bool:
    """True when the group has committed every partition of `topic` up to its end."""
    ends = await end_offsets(kafka, topic)
    committed = await committed_offsets(kafka, group, topic)
    return all(committed.get(p, 0) == end for p, end in ends.items())


async def calls_by_key(session: aiohttp.ClientSession, mock_url: str) -> dict[str, int]:
    """The mock counterparty's calls per Idempotency-Key (it must run with --record-keys)."""
    async with session.get(f"{mock_url}calls") as response:
        body = await response.json()
        if response.status != 200:
            raise HarnessError(f"GET {mock_url}calls answered {response.status}: {body}")
    return {str(key): int(count) for key, count in body["calls"].items()}
