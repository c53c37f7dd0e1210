"""The reconciliation job mirrors its DLQ topic into `dlq_record` (the console's index): every
DLQ record once, a hostile one as text previews, a second cycle changing nothing; the cycle's
counts land in `reconcile_cycle`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from pyspark.sql import SparkSession
from reconcile_helpers import WaitTopic, produce, run_cycle

from dispatcher.wire import Failure, OutgoingRecord, dlq_record

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_the_job_indexes_its_dlq_records_once_each(spark: SparkSession,
                                                    waits: WaitTopic) -> None:
    past = datetime.now(UTC) - timedelta(minutes=5)
    sources = [waits.source(i) for i in range(5)]
    waits.produce([waits.prepare(source, past) for source in sources])
    hostile = OutgoingRecord(key=b"<script>alert(1)</script>", value=b"\xff\x00\x1b[31m",
                             headers=(("<b>", b"\xfe"),))
    asyncio.run(produce(waits.bootstrap, waits.dlq_topic, [hostile]))

    first = run_cycle(spark, waits.config())
    second = run_cycle(spark, waits.config())

    assert (first.expired_sent, first.dlq_indexed) == (5, 6)
    assert second.dlq_indexed == 0
    with psycopg.connect(waits.dsn) as conn:
        rows = conn.execute(
            "SELECT exception, original_topic, original_offset, wait_id::text, key_preview,"
            " problem IS NOT NULL FROM dlq_record WHERE dlq_topic = %s ORDER BY dlq_offset",
            (waits.dlq_topic,)).fetchall()
        cycle = conn.execute(
            "SELECT dlq_topic, expired_sent, dlq_indexed FROM reconcile_cycle"
            " WHERE wait_topic = %s", (waits.wait_topic,)).fetchone()
    assert rows[0][4] == "<script>alert(1)</script>" and rows[0][5]  # malformed, kept as text
    expired = rows[1:]
    assert {row[0] for row in expired} == {"ExpiredRecordException"}
    assert sorted(row[2] for row in expired) == [source.offset for source in sources]
    assert {row[3] for row in expired} == {waits.wait_id(source) for source in sources}
    assert cycle == (waits.dlq_topic, 0, 0)  # the second cycle's counts


def test_rows_of_records_kafka_no_longer_has_leave_the_index(spark: SparkSession,
                                                              waits: WaitTopic) -> None:
    failure = Failure("TimeoutError", "no answer")
    records = [dlq_record(waits.source(i), waits.group, failure) for i in range(5)]
    asyncio.run(produce(waits.bootstrap, waits.dlq_topic, records))
    first = run_cycle(spark, waits.config())
    asyncio.run(_delete_records(waits.bootstrap, TopicPartition(waits.dlq_topic, 0), 3))

    second = run_cycle(spark, waits.config())
    third = run_cycle(spark, waits.config())

    assert (first.dlq_indexed, first.dlq_pruned) == (5, 0)
    assert (second.dlq_indexed, second.dlq_pruned) == (0, 3)
    assert third.dlq_pruned == 0
    with psycopg.connect(waits.dsn) as conn:
        offsets = [row[0] for row in conn.execute(
            "SELECT dlq_offset FROM dlq_record WHERE dlq_topic = %s ORDER BY dlq_offset",
            (waits.dlq_topic,))]
        hourly = conn.execute("SELECT sum(records) FROM dlq_hourly WHERE dlq_topic = %s",
                              (waits.dlq_topic,)).fetchone()
    assert offsets == [3, 4]  # the console lists only what Kafka still has
    assert hourly == (2,)  # and the overview counts only those


async def _delete_records(bootstrap: str, partition: TopicPartition, before: int) -> None:
    """Move `partition`'s log start to `before`, as retention would (the admin API's
    DeleteRecords)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({partition: RecordsToDelete(before_offset=before)})
    finally:
        await admin.close()
