"""The expiry sweep against a real PostgreSQL and Kafka: expired rows become DLQ records."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from dispatch_helpers import create_topic

from connectors.rows import WaitEvent
from connectors.sink import apply_batch
from connectors.source import (
    EXPIRED_EXCEPTION,
    ExpiredWait,
    claim_expired,
    expire_once,
    mark_sent,
    to_dlq,
)
from dispatcher.kafka.config import KafkaConfig
from dispatcher.wire import (
    DlqEntry,
    Headers,
    SourceRecord,
    format_expiration,
    parse_dlq_record,
    wait_id_for,
    wait_record,
)

pytestmark = pytest.mark.integration

NOW = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)


class Registry:
    """Opens waits of one dispatcher group through the real mirror."""

    def __init__(self, conn: psycopg.Connection, group: str) -> None:
        self.conn = conn
        self.group = group
        self.wait_topic = f"{group}.wait"
        self.dlq_topic = f"{group}.dlq"
        self._next_wait_offset = 0

    def open_wait(
        self, source: SourceRecord, expires_at: datetime, trace_headers: Headers = ()
    ) -> uuid.UUID:
        """A prepare of `source` mirrored; `trace_headers` after ours: a traced record's."""
        record = wait_record(source, self.group, expires_at)
        event = WaitEvent(
            self.wait_topic, 0, self._next_wait_offset, record.key, record.value,
            (*record.headers, *trace_headers),
        )  # fmt: skip
        self._next_wait_offset += 1
        apply_batch(self.conn, [event], dlq_topic=self.dlq_topic, group=self.group)
        return wait_id_for(self.group, source.topic, source.partition, source.offset)

    def sent_at(self) -> dict[uuid.UUID, datetime | None]:
        rows = self.conn.execute(
            "SELECT wait_id, dlq_sent_at FROM wait WHERE wait_topic = %s", (self.wait_topic,)
        ).fetchall()
        self.conn.commit()
        return dict(rows)


def source(offset: int, **changes: object) -> SourceRecord:
    fields: dict[str, object] = {
        "topic": "orders",
        "partition": 0,
        "offset": offset,
        "key": f"order-{offset}".encode(),
        "value": f'{{"n": {offset}}}'.encode(),
        "headers": (("b", b"2"), ("a", b"1"), ("bin", b"\x00\xff"), ("nul", None)),
        "timestamp_ms": 1_700_000_000_000 + offset,
    }
    fields.update(changes)
    return SourceRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_dsn) as connection:
        yield connection


@pytest.fixture
def registry(conn: psycopg.Connection, unique_name: Callable[[str], str]) -> Registry:
    return Registry(conn, unique_name("sweep"))


def test_claim_returns_expired_unsent_rows_of_its_wait_topic_oldest_first(
    conn: psycopg.Connection, registry: Registry, unique_name: Callable[[str], str]
) -> None:
    late = registry.open_wait(source(1), NOW - timedelta(seconds=1))
    early = registry.open_wait(source(2), NOW - timedelta(hours=1))
    registry.open_wait(source(3), NOW + timedelta(seconds=1))
    Registry(conn, unique_name("other")).open_wait(source(4), NOW - timedelta(days=1))

    claimed = claim_expired(conn, wait_topic=registry.wait_topic, limit=10, now=NOW)
    assert [row.wait_id for row in claimed] == [early, late]
    assert [row.wait_id for row in claim_expired(conn, wait_topic=registry.wait_topic,
                                                 limit=1, now=NOW)] == [early]  # fmt: skip
    conn.rollback()


def test_claimed_row_holds_the_original_record(
    conn: psycopg.Connection, registry: Registry
) -> None:
    original = source(5, key=None)
    expires_at = NOW - timedelta(minutes=1)
    wait_id = registry.open_wait(original, expires_at)
    (row,) = claim_expired(conn, wait_topic=registry.wait_topic, limit=5, now=NOW)
    conn.rollback()
    assert row == ExpiredWait(
        wait_topic=registry.wait_topic,
        wait_id=wait_id,
        wait_partition=0,
        wait_offset=0,
        source=original,
        expires_at=expires_at,
        dlq_topic=registry.dlq_topic,
        group=registry.group,
    )


def test_concurrent_claims_never_return_the_same_row(pg_dsn: str, registry: Registry) -> None:
    opened = {registry.open_wait(source(i), NOW - timedelta(minutes=i)) for i in range(10)}
    with psycopg.connect(pg_dsn) as first, psycopg.connect(pg_dsn) as second:
        a = claim_expired(first, wait_topic=registry.wait_topic, limit=4, now=NOW)
        b = claim_expired(second, wait_topic=registry.wait_topic, limit=100, now=NOW)
        c = claim_expired(second, wait_topic=registry.wait_topic, limit=100, now=NOW)
        ids_a, ids_b = {r.wait_id for r in a}, {r.wait_id for r in b}
        assert len(ids_a) == 4
        assert ids_a.isdisjoint(ids_b)
        assert ids_a | ids_b == opened
        assert {r.wait_id for r in c} == ids_b, "a transaction sees its own locked rows"


def test_mark_sent_takes_the_row_out_of_later_claims(
    conn: psycopg.Connection, registry: Registry
) -> None:
    sent = registry.open_wait(source(1), NOW - timedelta(minutes=2))
    kept = registry.open_wait(source(2), NOW - timedelta(minutes=1))
    rows = claim_expired(conn, wait_topic=registry.wait_topic, limit=1, now=NOW)
    mark_sent(conn, rows)
    conn.commit()
    assert [r.wait_id for r in claim_expired(conn, wait_topic=registry.wait_topic,
                                             limit=10, now=NOW)] == [kept]  # fmt: skip
    conn.rollback()
    states = registry.sent_at()
    assert states[sent] is not None
    assert states[kept] is None


def test_claim_outside_a_transaction_is_refused(pg_dsn: str, registry: Registry) -> None:
    with (
        psycopg.connect(pg_dsn, autocommit=True) as autocommit,
        pytest.raises(ValueError, match="open transaction"),
    ):
        claim_expired(autocommit, wait_topic=registry.wait_topic, limit=1)


def test_re_prepared_row_is_claimable_again_after_its_new_expiry(
    conn: psycopg.Connection, registry: Registry
) -> None:
    wait_id = registry.open_wait(source(1), NOW - timedelta(minutes=1))
    mark_sent(conn, claim_expired(conn, wait_topic=registry.wait_topic, limit=10, now=NOW))
    conn.commit()
    registry.open_wait(source(1), NOW + timedelta(minutes=1))
    assert claim_expired(conn, wait_topic=registry.wait_topic, limit=10, now=NOW) == []
    later = NOW + timedelta(minutes=2)
    again = claim_expired(conn, wait_topic=registry.wait_topic, limit=10, now=later)
    conn.rollback()
    assert [(r.wait_id, r.wait_offset) for r in again] == [(wait_id, 1)]


def test_to_dlq_writes_the_dispatchers_dlq_format(
    conn: psycopg.Connection, registry: Registry
) -> None:
    original = source(9)
    expires_at = NOW - timedelta(seconds=30)
    wait_id = registry.open_wait(original, expires_at)
    (row,) = claim_expired(conn, wait_topic=registry.wait_topic, limit=1, now=NOW)
    conn.rollback()
    topic, record = to_dlq(row)
    entry = parse_dlq_record(record.key, record.value, record.headers)
    assert topic == registry.dlq_topic
    assert entry.source == original
    assert entry.wait_id == wait_id
    assert entry.group == registry.group
    assert entry.failure.exception == EXPIRED_EXCEPTION
    assert format_expiration(expires_at) in entry.failure.message


def test_the_dlq_record_of_a_traced_wait_continues_its_record_span(
    conn: psycopg.Connection, registry: Registry
) -> None:
    """The trace headers the prepare carried (the record span's) come back with the claimed row,
    and the DLQ record carries them in place of the producer's."""
    trace: Headers = (("traceparent", b"00-aa-bb-01"), ("tracestate", b"v=1"))
    original = source(10, headers=(("traceparent", b"00-producer-01"), ("a", b"1")))
    registry.open_wait(original, NOW - timedelta(seconds=30), trace)
    registry.open_wait(source(11), NOW - timedelta(seconds=30))
    traced, untraced = claim_expired(conn, wait_topic=registry.wait_topic, limit=2, now=NOW)
    conn.rollback()
    assert (traced.trace_headers, untraced.trace_headers) == (trace, ())
    record = to_dlq(traced)[1]
    assert parse_dlq_record(record.key, record.value, record.headers).source.headers == (
        ("a", b"1"), *trace)
    record = to_dlq(untraced)[1]
    assert parse_dlq_record(record.key, record.value, record.headers).source == source(11)


async def read_dlq(bootstrap: str, topic: str, expected: int) -> list[DlqEntry]:
    """Every record of `topic`'s partition 0 once `expected` are there (or 20 s have passed)."""
    records = await read_partition(bootstrap, topic, expected)
    return [parse_dlq_record(r.key, r.value, tuple(r.headers)) for r in records]


async def read_partition(bootstrap: str, topic: str, expected: int) -> list[Any]:
    """Every record of `topic`'s partition 0 once `expected` are there (or 20 s have passed)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        records: list[Any] = []
        deadline = asyncio.get_running_loop().time() + 20
        while len(records) < expected and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(partition, timeout_ms=500)
            records.extend(batch.get(partition, []))
        # Anything beyond `expected` would be a duplicate: give it a moment to show up.
        records.extend((await consumer.getmany(partition, timeout_ms=500)).get(partition, []))
        return records
    finally:
        await consumer.stop()


async def test_expire_once_sends_each_expired_row_once(
    pg_dsn: str, kafka_bootstrap: str, registry: Registry
) -> None:
    await create_topic(kafka_bootstrap, registry.dlq_topic, 1)
    await create_topic(kafka_bootstrap, registry.wait_topic, 1)
    past = datetime.now(UTC) - timedelta(minutes=1)
    originals = [source(i) for i in range(7)]
    expired_ids = {registry.open_wait(original, past) for original in originals}
    pending = registry.open_wait(source(100), datetime.now(UTC) + timedelta(hours=1))

    kafka = KafkaConfig(kafka_bootstrap, "test")
    sent = await expire_once(pg_dsn, kafka, wait_topic=registry.wait_topic,
                             batch_size=3)  # fmt: skip
    assert sent == 7
    entries = await read_dlq(kafka_bootstrap, registry.dlq_topic, expected=7)
    assert sorted((e.source for e in entries), key=lambda s: s.offset) == originals
    assert {e.failure.exception for e in entries} == {EXPIRED_EXCEPTION}
    # Each DLQ record is followed by the tombstone that closes its wait.
    tombstones = await read_partition(kafka_bootstrap, registry.wait_topic, expected=7)
    assert {uuid.UUID(r.key.decode()) for r in tombstones if r.value is None} == expired_ids
    assert len(tombstones) == 7

    states = registry.sent_at()
    assert states.pop(pending) is None
    assert all(sent_at is not None for sent_at in states.values())

    again = await expire_once(pg_dsn, kafka, wait_topic=registry.wait_topic)
    assert again == 0
    assert len(await read_dlq(kafka_bootstrap, registry.dlq_topic, expected=8)) == 7
