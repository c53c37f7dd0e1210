"""The expiry sweep closes what it expires: after the DLQ record is acknowledged it writes the
wait id's tombstone to the wait topic, in the prepare's partition; the row leaves the table when
the mirror applies that tombstone, and a late tombstone from a pod changes nothing."""

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


def sent_rows(waits: WaitTopic) -> set[str]:
    with psycopg.connect(waits.dsn) as conn:
        rows = conn.execute(
            "SELECT wait_id::text FROM wait WHERE wait_topic = %s AND dlq_sent_at IS NOT NULL",
            (waits.wait_topic,),
        ).fetchall()
    return {row[0] for row in rows}


def test_the_sweep_tombstones_what_it_expired_and_the_mirror_then_deletes_the_row(
    spark: SparkSession, waits: WaitTopic
) -> None:
    past = datetime.now(UTC) - timedelta(seconds=5)
    derived = [waits.source(offset) for offset in range(4)]
    random_id, foreign = uuid.uuid4(), original(9)
    waits.produce(
        [
            *(waits.prepare(s, past) for s in derived),
            reference_wait_record(random_id, foreign, past.strftime("%Y-%m-%dT%H:%M:%S.%f")),
        ]
    )
    expired_ids = {waits.wait_id(s) for s in derived} | {str(random_id)}
    prepared_in = {
        r.key.decode(): r.partition for r in waits.wait_topic_records() if r.key is not None
    }

    first = run_cycle(spark, waits.config())

    assert first.expired_sent == len(expired_ids)
    assert sent_rows(waits) == expired_ids  # sent, its tombstone not mirrored yet
    tombstones = [r for r in waits.wait_topic_records() if r.value is None]
    assert sorted(r.key.decode() for r in tombstones if r.key) == sorted(expired_ids)
    assert {r.key.decode(): r.partition for r in tombstones if r.key} == prepared_in

    second = run_cycle(spark, waits.config())
    assert (second.deleted, second.expired_sent) == (len(expired_ids), 0)
    assert waits.open_wait_ids() == set()

    # The pod that owned one of them comes back and ends its lifecycle late: nothing changes.
    waits.produce([waits.close(derived[0], past)])
    third = run_cycle(spark, waits.config())
    assert (third.events_in, third.deleted, third.expired_sent) == (1, 0, 0)
    dlq = [parse_dlq_record(key, value, headers) for key, value, headers in waits.dlq_records()]
    assert sorted(str(d.wait_id) for d in dlq) == sorted(expired_ids)

