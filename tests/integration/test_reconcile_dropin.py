"""Drop-in: the job reads wait topics written by the reference (Kotlin) design too.

Those records are keyed by random UUIDs, not by Waitline's derived ids, and carry the headers of
DESIGN.md's table written one by one, with a zone-less WAIT_EXPIRATION_TIME. Every parseable one
is mirrored and expires into a DLQ record that rebuilds its original; a non-derived id is
counted, never rejected; only a record that cannot be parsed lands in `wait_reject`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from pyspark.sql import SparkSession
from reconcile_helpers import WaitTopic, original, reference_wait_record, run_cycle

from dispatcher.wire import parse_dlq_record

# Spark on a loaded 2-core machine: the first test also starts the JVM; not a speed check.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_reference_format_waits_expire_into_dlq_records_that_rebuild_the_originals(
    spark: SparkSession, waits: WaitTopic
) -> None:
    past = datetime.now(UTC) - timedelta(minutes=5)
    expirations = [
        past.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3],  # LocalDateTime.toString(): no zone
        past.strftime("%Y-%m-%dT%H:%M:%S"),
        past.strftime("%Y-%m-%dT%H:%M:%S.%f"),
        past.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        past.strftime("%Y-%m-%dT%H:%M"),
        past.isoformat(),
    ]
    expired = {uuid.uuid4(): original(i) for i in range(len(expirations))}
    closed_id, closed = uuid.uuid4(), original(50)
    unparseable_id = uuid.uuid4()
    waits.produce(
        [
            *(
                reference_wait_record(wait_id, source, expiration)
                for (wait_id, source), expiration in zip(expired.items(), expirations, strict=True)
            ),
            reference_wait_record(closed_id, closed, expirations[0]),
            reference_wait_record(closed_id, closed, expirations[0], tombstone=True),
            reference_wait_record(unparseable_id, original(60), "next tuesday"),
        ]
    )

    report = run_cycle(spark, waits.config())

    assert report.expired_sent == len(expired)
    assert report.rejected == 1
    assert report.non_derived == len(expired)
    dlq = [parse_dlq_record(key, value, headers) for key, value, headers in waits.dlq_records()]
    assert {entry.wait_id: entry.source for entry in dlq} == expired
    assert {entry.failure.exception for entry in dlq} == {"ExpiredRecordException"}
    with psycopg.connect(waits.dsn) as conn:
        rejects = conn.execute(
            "SELECT record_key, reason FROM wait_reject WHERE wait_topic = %s",
            (waits.wait_topic,),
        ).fetchall()
    assert [key for key, _ in rejects] == [str(unparseable_id).encode()]
    assert "WAIT_EXPIRATION_TIME" in rejects[0][1]
