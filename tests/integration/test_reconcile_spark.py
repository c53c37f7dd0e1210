"""The Spark reconciliation job against a real Kafka, a real PostgreSQL and Spark in local mode.

One SparkSession serves the test session (each start costs ~10-20 s here). Each test has its own
group, wait topic, DLQ topic and checkpoint, so tests share the broker and the database safely.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaProducer
from pyspark.sql import SparkSession
from reconcile_helpers import (
    LATER,
    WaitTopic,
    run_cycle,
    run_in_thread,
    service_of_its_own,
    wait_until,
)

from devstack.stack import PostgresService
from dispatcher.errors import ConfigError
from dispatcher.ports import free_port
from dispatcher.wire import (
    OutgoingRecord,
    SourceRecord,
    parse_dlq_record,
    tombstone_of,
    wait_record,
    withdrawal_of,
)
from spark_jobs.config import ReconcileConfig, parse_kafka_options
from spark_jobs.kafka_options import spark_producer_options
from spark_jobs.reconcile import ReconcileJob

# Spark on a loaded 2-core machine: the first test also starts the JVM; not a speed check.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_config_defaults_topics_from_the_group_and_rejects_bad_values(tmp_path: Path) -> None:
    config = ReconcileConfig.build(group="payments", bootstrap_servers="k:9092", dsn="dbname=x",
                                   checkpoint_dir=str(tmp_path))  # fmt: skip
    assert (config.wait_topic, config.dlq_topic) == ("payments.wait", "payments.dlq")
    assert config.trigger_interval_s == 5.0
    with pytest.raises(ConfigError, match="--trigger"):
        ReconcileConfig.build(group="g", bootstrap_servers="k", dsn="d", trigger="0s")
    with pytest.raises(ConfigError, match="must differ"):
        ReconcileConfig.build(group="g", bootstrap_servers="k", dsn="d", dlq_topic="g.wait")
    with pytest.raises(ConfigError, match="valid Kafka topic name"):
        ReconcileConfig.build(group="g", bootstrap_servers="k", dsn="d", wait_topic="a b")


def test_kafka_options_pass_through_only_prefixed_client_properties() -> None:
    options = ["kafka.security.protocol=SASL_SSL", "kafka.client.dns.lookup=use_all_dns_ips"]
    assert parse_kafka_options(options) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.client.dns.lookup": "use_all_dns_ips",
    }  # a secret-bearing one (the JAAS line) is refused: tests/unit/test_spark_kafka_options.py
    with pytest.raises(ConfigError, match=r"prefixed with 'kafka\.'"):
        parse_kafka_options(["security.protocol=SSL"])
    with pytest.raises(ConfigError, match="--bootstrap-servers"):
        parse_kafka_options(["kafka.bootstrap.servers=x:1"])
    with pytest.raises(ConfigError, match=r"kafka\.<property>=<value>"):
        parse_kafka_options(["kafka.acks"])


def test_the_source_waits_briefly_for_fetches_unless_the_user_says_otherwise() -> None:
    config = ReconcileConfig.build(group="g", bootstrap_servers="k:9092", dsn="d",
                                   kafka_options=["kafka.client.dns.lookup=use_all_dns_ips"])
    assert config.source_options() == {"kafka.bootstrap.servers": "k:9092",
                                       "kafka.security.protocol": "PLAINTEXT",
                                       "kafka.fetch.max.wait.ms": "10",
                                       "kafka.client.dns.lookup": "use_all_dns_ips"}
    # A consumer setting is not given to the DLQ's producer; the writers' durability is.
    assert config.sink_options() == {"kafka.bootstrap.servers": "k:9092",
                                     "kafka.security.protocol": "PLAINTEXT",
                                     "kafka.client.dns.lookup": "use_all_dns_ips",
                                     **spark_producer_options()}
    tuned = ReconcileConfig.build(group="g", bootstrap_servers="k", dsn="d",
                                  kafka_options=["kafka.fetch.max.wait.ms=200"])  # fmt: skip
    assert tuned.source_options()["kafka.fetch.max.wait.ms"] == "200"


def test_a_security_kafka_option_against_the_environment_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"kafka\.security\.protocol=SSL contradicts "
                                          r"WAITLINE_SECURITY_PROTOCOL=PLAINTEXT"):
        ReconcileConfig.build(group="g", bootstrap_servers="k:9092", dsn="d",
                              kafka_options=["kafka.security.protocol=SSL"])


def test_prepares_and_tombstones_in_same_or_different_batches_converge(
    spark: SparkSession, waits: WaitTopic
) -> None:
    sources = [waits.source(offset) for offset in range(40)]
    # Batch 1 holds the prepares of all 40 and the tombstones of the first 10.
    waits.produce([waits.prepare(s) for s in sources] + [waits.close(s) for s in sources[:10]])
    first = run_cycle(spark, waits.config())
    assert first.events_in == 50
    assert waits.open_wait_ids() == {waits.wait_id(s) for s in sources[10:]}

    # The tombstones of the next 10 arrive in a later cycle than their prepares.
    waits.produce([waits.close(s) for s in sources[10:20]])
    second = run_cycle(spark, waits.config())
    assert (second.events_in, second.deleted) == (10, 10)
    assert waits.open_wait_ids() == {waits.wait_id(s) for s in sources[20:]}

    # Re-mirroring the whole topic from scratch in 5-record batches (prepares and tombstones
    # split across batches at every boundary) converges to the same table.
    replay_config = waits.config(
        checkpoint_dir=str(waits.checkpoint) + "-replay", max_offsets_per_trigger=5
    )
    replay = run_cycle(spark, replay_config)
    assert replay.batches >= 60 // 5
    assert replay.events_in == 60
    assert waits.open_wait_ids() == {waits.wait_id(s) for s in sources[20:]}


def test_expired_waits_become_dlq_records_that_rebuild_the_original_once(
    spark: SparkSession, waits: WaitTopic
) -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    odd = [
        waits.source(0, key=None),
        waits.source(1, key=b"\xff\xfe binary key", value=b""),
        waits.source(2, headers=(("bin", b"\x00\xff"), ("none", None), ("d", b"1"), ("d", b"2"))),
        waits.source(3, key=b"base64:looks-encoded", headers=()),
        waits.source(4, value=bytes(range(256)) * 40),
    ]
    open_not_due = waits.source(5)
    closed_in_time = waits.source(6)
    waits.produce(
        [
            *(waits.prepare(s, past) for s in odd),
            waits.prepare(open_not_due, LATER),
            waits.prepare(closed_in_time, past),
            waits.close(closed_in_time, past),
        ]
    )

    first = run_cycle(spark, waits.config())

    assert first.expired_sent == len(odd)
    dlq = [parse_dlq_record(key, value, headers) for key, value, headers in waits.dlq_records()]
    assert sorted((d.source for d in dlq), key=lambda s: s.offset) == odd
    assert {d.failure.exception for d in dlq} == {"ExpiredRecordException"}
    assert {d.group for d in dlq} == {waits.group}
    assert {str(d.wait_id) for d in dlq} == {waits.wait_id(s) for s in odd}

    second = run_cycle(spark, waits.config())
    assert second.expired_sent == 0
    assert len(waits.dlq_records()) == len(odd)
    # The sweep's tombstones, mirrored by the second cycle, closed what the first one expired.
    assert second.deleted == len(odd)
    assert waits.open_wait_ids() == {waits.wait_id(open_not_due)}


def test_an_expired_traced_waits_dlq_record_continues_its_record_span(
    spark: SparkSession, waits: WaitTopic
) -> None:
    """A traced record's prepare carries its record span's W3C headers; the job's expiry writes
    them into the DLQ record in place of the producer's, so the record's trace shows its expiry.
    An untraced prepare's DLQ record keeps the original headers."""
    past = datetime.now(UTC) - timedelta(seconds=1)
    trace = (("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
             ("tracestate", b"vendor=7"))  # fmt: skip
    traced_source = waits.source(0, headers=(("traceparent", b"00-producer-01"), ("a", b"1")))
    untraced_source = waits.source(1)
    prepare = waits.prepare(traced_source, past)
    waits.produce([
        OutgoingRecord(prepare.key, prepare.value, (*prepare.headers, *trace)),
        waits.prepare(untraced_source, past),
    ])  # fmt: skip

    assert run_cycle(spark, waits.config()).expired_sent == 2
    dlq = {d.source.offset: d for d in (parse_dlq_record(key, value, headers)
                                        for key, value, headers in waits.dlq_records())}
    assert dlq[0].source.headers == (("a", b"1"), *trace)
    assert dlq[1].source == untraced_source


def test_re_prepared_record_leaves_no_stale_row(spark: SparkSession, waits: WaitTopic) -> None:
    source = waits.source(7)
    first_expiry = datetime.now(UTC) + timedelta(minutes=1)
    waits.produce([waits.prepare(source, first_expiry)])
    run_cycle(spark, waits.config())

    # The dispatcher crashed and redelivered the record: same wait id, new deadline.
    waits.produce([waits.prepare(source, LATER)])
    run_cycle(spark, waits.config())
    with psycopg.connect(waits.dsn) as conn:
        rows = conn.execute(
            "SELECT wait_id::text, wait_expiration_time FROM wait WHERE wait_topic = %s",
            (waits.wait_topic,),
        ).fetchall()
    assert rows == [(waits.wait_id(source), LATER)]

    waits.produce([waits.close(source, LATER)])
    run_cycle(spark, waits.config())
    assert waits.open_wait_ids() == set()


def test_a_withdrawal_closes_only_its_generations_row_in_any_batch(
    spark: SparkSession, waits: WaitTopic
) -> None:
    """The Spark side keeps a withdrawal (a tombstone with WAITLINE_WITHDRAWN) and its headers:
    it must not drop, as a closing tombstone does, the next owner's prepare before it in the
    batch. Record a: the late prepare of generation 7 and its withdrawal land while the next
    owner (8) calls it. Record b: they land after the next owner's tombstone. Record c: a
    tombstone with no headers still closes (the withdrawal test must not need them)."""
    a, b = waits.source(1), waits.source(2)

    def by(generation: int, source: SourceRecord) -> OutgoingRecord:
        return wait_record(source, waits.group, LATER, generation=generation)

    c = waits.source(3)  # closed by a tombstone written by hand: its key, no headers at all
    by_hand = OutgoingRecord(by(8, c).key, None, ())
    waits.produce([by(8, a), by(7, a), withdrawal_of(by(7, a)),
                   by(8, b), tombstone_of(by(8, b)), by(7, b), withdrawal_of(by(7, b)),
                   by(8, c), by_hand])
    report = run_cycle(spark, waits.config())
    assert waits.open_wait_ids() == {waits.wait_id(a)}
    assert report.withdrawn == 1  # record b's late prepare; a's withdrawal found 8's row
    with psycopg.connect(waits.dsn) as conn:
        assert conn.execute("SELECT writer_generation FROM wait WHERE wait_topic = %s",
                            (waits.wait_topic,)).fetchall() == [(8,)]


def test_restart_from_checkpoint_resumes_without_loss_or_duplicates(
    spark: SparkSession, waits: WaitTopic
) -> None:
    before = [waits.source(offset) for offset in range(0, 30)]
    after = [waits.source(offset) for offset in range(30, 50)]
    waits.produce([waits.prepare(s) for s in before] + [waits.close(s) for s in before[::2]])
    assert run_cycle(spark, waits.config()).events_in == 45

    waits.produce([waits.prepare(s) for s in after] + [waits.close(s) for s in before[1::2]])
    resumed = run_cycle(spark, waits.config())

    assert resumed.events_in == 35  # only what arrived since the checkpoint
    assert waits.open_wait_ids() == {waits.wait_id(s) for s in after}


@pytest.fixture
def own_postgres() -> Iterator[PostgresService]:
    """A PostgreSQL of this test's own, which it may stop and start."""
    with service_of_its_own(lambda home: PostgresService(home, free_port()),
                            "waitline-pg-outage-") as service:
        service.ensure_database()
        yield service


class TrafficGenerator(threading.Thread):
    """Prepares waits at a steady rate and closes all but every fifth one, until stopped."""

    def __init__(self, waits: WaitTopic, rate_per_s: float) -> None:
        super().__init__(daemon=True)
        self.waits = waits
        self.rate_per_s = rate_per_s
        self.stopped = threading.Event()
        self.left_open: set[str] = set()
        self.prepared = 0

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.waits.bootstrap, acks="all")
        await producer.start()
        try:
            offset = 0
            while not self.stopped.is_set():
                batch = [self.waits.source(offset + i) for i in range(10)]
                offset += len(batch)
                records = [self.waits.prepare(s) for s in batch]
                records += [self.waits.close(s) for s in batch if s.offset % 5]
                for r in records:
                    await producer.send_and_wait(
                        self.waits.wait_topic, key=r.key, value=r.value, headers=list(r.headers)
                    )
                self.left_open |= {self.waits.wait_id(s) for s in batch if not s.offset % 5}
                self.prepared += len(batch)
                await asyncio.sleep(len(batch) / self.rate_per_s)
        finally:
            await producer.stop()



@pytest.mark.timeout(300)
def test_postgres_outage_stalls_the_mirror_which_then_converges(
    spark: SparkSession, kafka_bootstrap: str, unique_name: Callable[[str], str],
    tmp_path: Path, own_postgres: PostgresService,
) -> None:  # fmt: skip
    waits = WaitTopic(unique_name("outage"), kafka_bootstrap, own_postgres.dsn,
                      tmp_path / "checkpoint")  # fmt: skip
    job = ReconcileJob(spark, waits.config(once=False, trigger="1s"))
    runner, job_errors = run_in_thread(job)
    traffic = TrafficGenerator(waits, rate_per_s=100)
    traffic.start()
    try:
        wait_until(lambda: traffic.prepared >= 200 and bool(waits.open_wait_ids()), 90,
                   "the mirror to apply the first waits")  # fmt: skip
        own_postgres.stop()
        during_outage = traffic.prepared
        wait_until(lambda: traffic.prepared >= during_outage + 600, 60,
                   "traffic during the outage")  # fmt: skip
        assert runner.is_alive(), job_errors
        assert job.registry_failures > 0, "the job never noticed the outage"
        own_postgres.start()
        own_postgres.wait_healthy()
        wait_until(lambda: traffic.prepared >= during_outage + 500, 60, "traffic after it")
    finally:
        traffic.stopped.set()
        traffic.join(30)
    try:
        wait_until(lambda: waits.open_wait_ids() == traffic.left_open, 90,
                   "the table to converge to the waits left open")  # fmt: skip
    finally:
        job.stop()
        runner.join(60)
    assert not job_errors
    assert not runner.is_alive()
