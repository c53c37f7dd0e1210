"""The mirror on a wait topic whose partition count grew (issue 12): one wait id's records in
two partitions are ordered by their Kafka timestamps, never by offsets of different partitions.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka import AIOKafkaProducer
from pyspark.sql import SparkSession
from reconcile_helpers import LATER, WaitTopic, run_cycle

from dispatcher.wire import OutgoingRecord, SourceRecord, parse_dlq_record

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

WAITS, FILLERS = 12, 40
FIRST_ATTEMPT_MS = 1_700_000_000_000
RETRY_MS = FIRST_ATTEMPT_MS + 60_000


async def _produce_at(bootstrap: str, topic: str,
                      records: list[tuple[int, int, OutgoingRecord]]) -> None:
    """Write each (partition, timestamp ms, record) as given."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for partition, at_ms, record in records:
            await producer.send_and_wait(topic, record.value, key=record.key, partition=partition,
                                         timestamp_ms=at_ms, headers=list(record.headers))
    finally:
        await producer.stop()


def test_a_retry_closed_in_a_new_partition_closes_the_wait_without_a_dlq_record(
    spark: SparkSession, waits: WaitTopic
) -> None:
    """The wait topic grew from one to two partitions while the pod was down: each record's
    first attempt is prepared in partition 1 behind other records (a high offset) and already
    expired; its retry was prepared and closed in partition 0 (low offsets) a minute later. One
    cycle must leave every wait closed and send nothing to the DLQ. Before, the mirror ordered by
    offset (or, for a wait id split over two Spark partitions, by which task ran last), kept the
    first attempt's row open and expired it: DLQ records for records that were called and
    closed. `untouched` checks that the sweep did run over expired rows."""
    expired = datetime.now(UTC) - timedelta(minutes=1)
    sources = [waits.source(offset) for offset in range(WAITS)]
    fillers: list[SourceRecord] = [waits.source(100 + offset) for offset in range(FILLERS)]
    untouched = waits.source(999)
    records = [
        *((1, FIRST_ATTEMPT_MS, waits.prepare(s, LATER)) for s in fillers),
        *((1, FIRST_ATTEMPT_MS, waits.close(s, LATER)) for s in fillers),
        *((1, FIRST_ATTEMPT_MS, waits.prepare(s, expired)) for s in sources),
        *((0, RETRY_MS, waits.prepare(s, expired)) for s in sources),
        *((0, RETRY_MS + 1, waits.close(s, expired)) for s in sources),
        (0, RETRY_MS, waits.prepare(untouched, expired)),
    ]
    asyncio.run(_produce_at(waits.bootstrap, waits.wait_topic, records))

    report = run_cycle(spark, waits.config())

    dlq = [parse_dlq_record(k, v, h).source for k, v, h in waits.dlq_records()]
    assert dlq == [untouched], f"{len(dlq) - 1} closed waits sent to the DLQ"
    assert report.expired_sent == 1
    assert waits.open_wait_ids() == {waits.wait_id(untouched)}
