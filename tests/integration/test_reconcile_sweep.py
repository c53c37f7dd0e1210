"""The expiry sweep closes what it expires: after the DLQ record is acknowledged it writes the
wait id's tombstone to the wait topic, in the prepare's partition; the row leaves the table when
the mirror applies that tombstone, and a late tombstone from a pod changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

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


def test_a_dlq_record_the_topic_refuses_is_parked_and_never_blocks_the_rows_behind_it(
    spark: SparkSession, kafka_bootstrap: str, pg_dsn: str,
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:  # fmt: skip
    waits = WaitTopic(unique_name("parked"), kafka_bootstrap, pg_dsn, tmp_path / "checkpoint",
                      dlq_configs={"max.message.bytes": "8192"})  # fmt: skip
    oldest = datetime.now(UTC) - timedelta(minutes=10)
    too_large = waits.source(0, value=b"x" * 20_000)  # fits the wait topic, not this DLQ
    behind = [waits.source(offset) for offset in range(1, 4)]
    waits.produce(
        [
            waits.prepare(too_large, oldest),  # heads the claim order: oldest expiration
            *(waits.prepare(s, oldest + timedelta(seconds=i + 1)) for i, s in enumerate(behind)),
        ]
    )

    first = run_cycle(spark, waits.config())

    assert first.expired_sent == len(behind)
    assert first.parked == 1
    dlq = [parse_dlq_record(key, value, headers) for key, value, headers in waits.dlq_records()]
    # Spark's sink fails the whole write for the one refused record; the halving writes the
    # others again, so they may be there twice (at least once, as after a crash), never lost.
    assert {d.source.offset: d.source for d in dlq} == {s.offset: s for s in behind}
    written_first = len(dlq)
    with psycopg.connect(waits.dsn) as conn:
        parked = conn.execute(
            "SELECT wait_id::text, dlq_error FROM wait"
            " WHERE wait_topic = %s AND dlq_failed_at IS NOT NULL AND dlq_sent_at IS NULL",
            (waits.wait_topic,),
        ).fetchall()
    assert [wait_id for wait_id, _ in parked] == [waits.wait_id(too_large)]
    assert "RecordTooLarge" in parked[0][1]

    # The parked row is not retried; the others are closed by their tombstones.
    second = run_cycle(spark, waits.config())
    assert (second.expired_sent, second.parked) == (0, 0)
    assert waits.open_wait_ids() == {waits.wait_id(too_large)}
    assert len(waits.dlq_records()) == written_first  # nothing new: the parked row is left
