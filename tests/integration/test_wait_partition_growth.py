"""A wait topic whose partition count grows while records are in flight (issue 12, "the
mirror orders by (partition, offset)"): each record's tombstone lands in its prepare's
partition, so compaction removes the pair and the registry closes the row."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from dispatch_helpers import (
    Answer,
    RecordingCounterparty,
    create_topic,
    pod_settings,
    read_topic,
    run_pod_until,
    wait_until,
)

from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration

RECORDS, GROWN_TO = 20, 6
CALL_S = 4.0  # long enough to grow the topic and let the pod's metadata catch up mid-call


async def _grow(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=partitions)})
    finally:
        await admin.close()


async def test_each_tombstone_lands_in_its_prepares_partition_after_the_wait_topic_grows(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """20 records are called (4 s each) with a one-partition wait topic; the topic grows to 6
    partitions mid-call and the pod's producer learns of it (metadata max age 500 ms). Every
    tombstone must follow its prepare into partition 0. Before the fix the tombstones went
    where the default partitioner hashed their keys among the 6 partitions, so a prepare in
    partition 0 was never closed there: compaction kept it, and the registry (which orders a
    wait id's records by offset within its partition) kept the row open until it expired."""
    topic, group = unique_name("orders"), unique_name("billing")
    wait_topic = f"{group}.wait"
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce(kafka_bootstrap, topic, RECORDS, progress=False)
    async with RecordingCounterparty(lambda _body: Answer(delay_s=CALL_S)) as counterparty:
        settings = pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                concurrency=RECORDS, metadata_max_age="500ms")
        grown = asyncio.Event()

        async def finished() -> bool:
            if not grown.is_set() and len(counterparty.calls) == RECORDS:
                await _grow(kafka_bootstrap, wait_topic, GROWN_TO)
                grown.set()
            if not grown.is_set():
                return False
            records = await read_topic(kafka_bootstrap, wait_topic)
            return sum(r.value is None for r in records) == RECORDS

        await run_pod_until(settings, finished, timeout_s=60)
        await wait_until(lambda: len(counterparty.calls) == RECORDS, "every record called once")

    partitions_by_id: dict[uuid.UUID, dict[str, set[int]]] = defaultdict(
        lambda: {"prepare": set(), "tombstone": set()})
    for record in await read_topic(kafka_bootstrap, wait_topic):
        kind = "tombstone" if record.value is None else "prepare"
        partitions_by_id[uuid.UUID(record.key.decode())][kind].add(record.partition)
    assert len(partitions_by_id) == RECORDS
    misplaced = {wait_id: seen for wait_id, seen in partitions_by_id.items()
                 if seen["tombstone"] != seen["prepare"]}
    assert not misplaced, f"{len(misplaced)} tombstones not in their prepare's partition"
