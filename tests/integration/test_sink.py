"""The mirror against a real PostgreSQL: wait-topic batches converge to the open wait ids."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.rows import WaitEvent
from connectors.sink import MirrorResult, apply_batch
from dispatcher.wire import (
    SourceRecord,
    wait_id_for,
    wait_record,
    wait_tombstone,
    withdrawal_of,
)

pytestmark = pytest.mark.integration

EXPIRES = datetime(2030, 1, 1, tzinfo=UTC)


class WaitTopic:
    """Builds the records a dispatcher of `group` would write to its wait topic."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.name = f"{group}.wait"
        self.dlq = f"{group}.dlq"

    def source(self, offset: int, **changes: Any) -> SourceRecord:
        fields: dict[str, Any] = {
            "topic": "orders",
            "partition": 1,
            "offset": offset,
            "key": f"k{offset}".encode(),
            "value": f"v{offset}".encode(),
            "headers": (("h", b"1"), ("bin", b"\xff")),
            "timestamp_ms": 1_700_000_000_000 + offset,
        }
        fields.update(changes)
        return SourceRecord(**fields)

    def wait_id(self, source_offset: int) -> uuid.UUID:
        return wait_id_for(self.group, "orders", 1, source_offset)

    def prepare(
        self, source_offset: int, wait_offset: int, expires_at: datetime = EXPIRES, *,
        partition: int = 0, at_ms: int = 0, generation: int | None = None,
    ) -> WaitEvent:
        record = wait_record(self.source(source_offset), self.group, expires_at,
                             generation=generation)
        return WaitEvent(self.name, partition, wait_offset, record.key, record.value,
                         record.headers, timestamp_ms=at_ms)

    def withdrawal(self, source_offset: int, wait_offset: int, generation: int) -> WaitEvent:
        record = withdrawal_of(wait_record(self.source(source_offset), self.group, EXPIRES,
                                           generation=generation))
        return WaitEvent(self.name, 0, wait_offset, record.key, record.value, record.headers)

    def tombstone(self, source_offset: int, wait_offset: int, *, partition: int = 0,
                  at_ms: int = 0) -> WaitEvent:
        record = wait_tombstone(self.source(source_offset), self.group, EXPIRES)
        return WaitEvent(self.name, partition, wait_offset, record.key, record.value,
                         record.headers, timestamp_ms=at_ms)

    def apply(self, conn: psycopg.Connection, events: list[WaitEvent]) -> MirrorResult:
        return apply_batch(conn, events, dlq_topic=self.dlq, group=self.group)


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_dsn) as connection:
        yield connection


@pytest.fixture
def topic(unique_name: Callable[[str], str]) -> WaitTopic:
    return WaitTopic(unique_name("sink"))


def open_waits(conn: psycopg.Connection, topic: WaitTopic) -> dict[uuid.UUID, int]:
    """wait id → wait offset of every row of `topic`."""
    rows = conn.execute(
        "SELECT wait_id, wait_offset FROM wait WHERE wait_topic = %s", (topic.name,)
    ).fetchall()
    conn.commit()
    return dict(rows)


def snapshot(conn: psycopg.Connection, topic: WaitTopic) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT *, original_headers::text FROM wait WHERE wait_topic = %s ORDER BY wait_id",
        (topic.name,),
    ).fetchall()
    conn.commit()
    return rows


def test_prepare_is_mirrored_with_every_column(conn: psycopg.Connection, topic: WaitTopic) -> None:
    result = topic.apply(conn, [topic.prepare(7, 3)])
    assert result == MirrorResult(upserted=1, deleted=0, rejected=0)
    row = conn.execute(
        "SELECT wait_partition, wait_offset, original_topic, original_partition, original_offset,"
        " original_key, original_timestamp_ms, original_headers::text, body,"
        " wait_expiration_time, dlq_topic, dispatcher_group, dlq_sent_at"
        " FROM wait WHERE wait_topic = %s AND wait_id = %s",
        (topic.name, topic.wait_id(7)),
    ).fetchone()
    assert row == (
        0, 3, "orders", 1, 7, b"k7", 1_700_000_000_007,
        '[["h","1"],["bin",{"base64":"/w=="}]]', b"v7",
        EXPIRES, topic.dlq, topic.group, None,
    )  # fmt: skip


def test_a_traced_prepares_trace_headers_are_mirrored_an_untraced_ones_are_null(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    traced = topic.prepare(7, 3)
    traced = replace(traced, headers=(*traced.headers, ("traceparent", b"00-aa-bb-01"),
                                      ("tracestate", b"v=1")))  # fmt: skip
    topic.apply(conn, [traced, topic.prepare(8, 4)])
    assert trace_headers(conn, topic) == {
        topic.wait_id(7): '{"traceparent":"00-aa-bb-01","tracestate":"v=1"}',
        topic.wait_id(8): None,
    }
    # Re-prepared with tracing off (or not sampled): the row keeps no trace of the last attempt.
    topic.apply(conn, [topic.prepare(7, 5)])
    assert trace_headers(conn, topic)[topic.wait_id(7)] is None


def trace_headers(conn: psycopg.Connection, topic: WaitTopic) -> dict[uuid.UUID, str | None]:
    rows = conn.execute(
        "SELECT wait_id, trace_headers::text FROM wait WHERE wait_topic = %s", (topic.name,)
    ).fetchall()
    conn.commit()
    return dict(rows)


def test_prepare_and_tombstone_in_one_batch_leave_no_row(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    result = topic.apply(conn, [topic.prepare(1, 0), topic.tombstone(1, 1)])
    assert result == MirrorResult(upserted=0, deleted=0, rejected=0)
    assert open_waits(conn, topic) == {}


def test_tombstone_in_a_later_batch_deletes_the_row(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    topic.apply(conn, [topic.prepare(1, 0), topic.prepare(2, 1)])
    result = topic.apply(conn, [topic.tombstone(1, 2)])
    assert result == MirrorResult(upserted=0, deleted=1, rejected=0)
    assert open_waits(conn, topic) == {topic.wait_id(2): 1}


def test_the_same_batch_applied_twice_changes_nothing(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    first_batch = [topic.prepare(1, 0), topic.prepare(2, 1)]
    topic.apply(conn, first_batch)
    batch = [topic.prepare(3, 2), topic.tombstone(1, 3), topic.prepare(4, 4)]
    topic.apply(conn, batch)
    before = snapshot(conn, topic)
    again = topic.apply(conn, batch)
    assert again == MirrorResult(upserted=0, deleted=0, rejected=0)
    assert snapshot(conn, topic) == before


def test_replaying_a_batch_does_not_reopen_a_row_already_sent_to_the_dlq(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    batch = [topic.prepare(1, 0)]
    topic.apply(conn, batch)
    conn.execute("UPDATE wait SET dlq_sent_at = now() WHERE wait_topic = %s", (topic.name,))
    conn.commit()
    topic.apply(conn, batch)
    (sent_at,) = conn.execute(
        "SELECT dlq_sent_at FROM wait WHERE wait_topic = %s", (topic.name,)
    ).fetchone() or (None,)
    assert sent_at is not None


def test_re_prepare_after_a_crash_reopens_the_same_row(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    topic.apply(conn, [topic.prepare(1, 0, expires_at=EXPIRES)])
    conn.execute(
        "UPDATE wait SET dlq_sent_at = now(), created_at = created_at - interval '1 hour'"
        " WHERE wait_topic = %s",
        (topic.name,),
    )
    conn.commit()
    later = EXPIRES + timedelta(minutes=5)
    result = topic.apply(conn, [topic.prepare(1, 9, expires_at=later)])
    assert result == MirrorResult(upserted=1, deleted=0, rejected=0)
    rows = conn.execute(
        "SELECT wait_offset, wait_expiration_time, dlq_sent_at, now() - created_at"
        " FROM wait WHERE wait_topic = %s",
        (topic.name,),
    ).fetchall()
    (offset, expires_at, sent_at, age) = rows[0]
    assert len(rows) == 1
    assert (offset, expires_at, sent_at) == (9, later, None)
    assert age >= timedelta(hours=1), "a re-prepare keeps the wait's first-seen time"


def test_an_older_batch_applied_late_does_not_regress_a_row(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    newer = EXPIRES + timedelta(days=1)
    topic.apply(conn, [topic.prepare(1, 5, expires_at=newer)])
    result = topic.apply(conn, [topic.prepare(1, 2), topic.prepare(2, 3)])
    assert result == MirrorResult(upserted=1, deleted=0, rejected=0)
    assert topic.apply(conn, [topic.tombstone(1, 4)]).deleted == 0
    assert open_waits(conn, topic) == {topic.wait_id(1): 5, topic.wait_id(2): 3}
    (expires_at,) = conn.execute(
        "SELECT wait_expiration_time FROM wait WHERE wait_id = %s", (topic.wait_id(1),)
    ).fetchone() or (None,)
    assert expires_at == newer


# A wait topic that grew: the first attempt's prepare stayed in partition 0 (high offset), the
# pod crashed, and the retry was prepared and closed in new partition 3 (low offsets, later).
FIRST_ATTEMPT_MS, RETRY_MS = 1_700_000_000_000, 1_700_000_005_000


def _first_attempt(topic: WaitTopic) -> WaitEvent:
    return topic.prepare(1, 500, partition=0, at_ms=FIRST_ATTEMPT_MS)


def _retry(topic: WaitTopic) -> list[WaitEvent]:
    return [topic.prepare(1, 2, partition=3, at_ms=RETRY_MS),
            topic.tombstone(1, 3, partition=3, at_ms=RETRY_MS + 200)]


@pytest.mark.parametrize("batches", [
    pytest.param(lambda t: [[_first_attempt(t)], _retry(t)], id="retry-in-a-later-batch"),
    pytest.param(lambda t: [[_first_attempt(t), *_retry(t)]], id="all-in-one-batch"),
    pytest.param(lambda t: [_retry(t)[:1], [_first_attempt(t)], _retry(t)[1:]],
                 id="first-attempt-applied-late"),
])
def test_a_wait_ids_records_in_two_partitions_are_ordered_by_time_not_offset(
    conn: psycopg.Connection, topic: WaitTopic,
    batches: Callable[[WaitTopic], list[list[WaitEvent]]],
) -> None:
    """Offsets of different partitions do not compare: the retry's tombstone (partition 3,
    offset 3) is newer than the first attempt's prepare (partition 0, offset 500) by its Kafka
    timestamp. Before, offset 500 won and the row stayed open until it expired into the DLQ —
    a DLQ record for a record that was called and closed."""
    for batch in batches(topic):
        topic.apply(conn, batch)
    assert open_waits(conn, topic) == {}


def test_within_a_partition_the_offset_orders_even_against_the_clock(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    """Two pods with skewed clocks wrote one partition: the later offset wins although its
    timestamp is earlier."""
    topic.apply(conn, [topic.prepare(1, 7, partition=2, at_ms=RETRY_MS)])
    topic.apply(conn, [topic.tombstone(1, 8, partition=2, at_ms=FIRST_ATTEMPT_MS)])
    assert open_waits(conn, topic) == {}


def generations(conn: psycopg.Connection, topic: WaitTopic) -> dict[uuid.UUID, int | None]:
    rows = conn.execute("SELECT wait_id, writer_generation FROM wait WHERE wait_topic = %s",
                        (topic.name,)).fetchall()
    conn.commit()
    return dict(rows)


@pytest.mark.parametrize("split", [False, True], ids=["one-batch", "batch-each"])
def test_a_late_prepare_of_an_earlier_owner_neither_replaces_nor_reopens(
    conn: psycopg.Connection, topic: WaitTopic, split: bool
) -> None:
    """Owner of generation 7 gave up on its prepare; the next owner (8) prepared record 1, and
    the late prepare landed after it (record 1, still called by 8) and after the next owner's
    tombstone (record 2): neither replaces the next owner's row nor stays open once withdrawn."""
    stream = [topic.prepare(1, 0, generation=8), topic.prepare(1, 1, generation=7),
              topic.withdrawal(1, 2, 7),
              topic.prepare(2, 3, generation=8), topic.tombstone(2, 4),
              topic.prepare(2, 5, generation=7)]
    for batch in ([[e] for e in stream] if split else [stream]):
        topic.apply(conn, batch)
    assert generations(conn, topic) == {topic.wait_id(1): 8, topic.wait_id(2): 7}
    assert open_waits(conn, topic)[topic.wait_id(1)] == 0  # the next owner's, untouched
    result = topic.apply(conn, [topic.withdrawal(2, 6, 7)])
    assert result == MirrorResult(upserted=0, deleted=0, rejected=0, withdrawn=1)
    assert generations(conn, topic) == {topic.wait_id(1): 8}


def test_a_withdrawal_closes_only_its_own_generations_row(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    topic.apply(conn, [topic.prepare(1, 0, generation=7), topic.prepare(2, 1)])
    result = topic.apply(conn, [topic.withdrawal(1, 2, 6), topic.withdrawal(2, 3, 6)])
    assert result.withdrawn == 0
    assert topic.apply(conn, [topic.withdrawal(1, 4, 7)]).withdrawn == 1
    assert generations(conn, topic) == {topic.wait_id(2): None}


def test_a_prepare_without_a_generation_is_ordered_by_offset(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    """Rows from pods before the generation header, and such pods during a rolling upgrade:
    the offset decides as before."""
    topic.apply(conn, [topic.prepare(1, 0, generation=9)])
    topic.apply(conn, [topic.prepare(1, 1)])
    assert generations(conn, topic) == {topic.wait_id(1): None}
    topic.apply(conn, [topic.prepare(1, 2, generation=3)])
    assert generations(conn, topic) == {topic.wait_id(1): 3}


def test_bad_records_are_stored_as_rejects_and_the_rest_is_applied(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    good = topic.prepare(1, 0)
    bad_key = WaitEvent(topic.name, 0, 1, b"\x00junk", b"value", (("x", b"\xff"),))
    foreign = replace(WaitTopic("other-app").prepare(2, 2), wait_topic=topic.name)
    no_headers = WaitEvent(topic.name, 0, 3, good.key, b"body", ())
    batch = [good, bad_key, foreign, no_headers, topic.prepare(3, 4)]
    # Another group's ids are not derived from this one: mirrored and counted, not rejected.
    misconfigured = apply_batch(conn, batch, dlq_topic=topic.dlq, group="another-group")
    assert misconfigured == MirrorResult(upserted=3, deleted=0, rejected=2, non_derived=3)
    assert topic.apply(conn, batch) == MirrorResult(upserted=0, deleted=0, rejected=2)
    conn.execute("DELETE FROM wait WHERE wait_topic = %s", (topic.name,))

    assert topic.apply(conn, batch) == MirrorResult(upserted=3, deleted=0, rejected=2,
                                                    non_derived=1)  # fmt: skip
    assert topic.apply(conn, batch) == MirrorResult(upserted=0, deleted=0, rejected=2)
    foreign_id = uuid.UUID(bytes(foreign.key or b"").decode())
    assert open_waits(conn, topic) == {topic.wait_id(1): 0, foreign_id: 2, topic.wait_id(3): 4}
    rejects = conn.execute(
        "SELECT wait_offset, record_key, record_value, record_headers::text, reason,"
        " dispatcher_group FROM wait_reject WHERE wait_topic = %s ORDER BY wait_offset",
        (topic.name,),
    ).fetchall()
    conn.commit()
    # A record's first reject is kept: the run with the wrong group came first.
    assert [(r[0], r[5]) for r in rejects] == [(1, "another-group"), (3, "another-group")]
    assert rejects[0][1:4] == (b"\x00junk", b"value", '[["x",{"base64":"/w=="}]]')
    assert "not a UUID" in rejects[0][4]


def test_batch_inside_a_caller_transaction_is_undone_by_its_rollback(
    conn: psycopg.Connection, topic: WaitTopic
) -> None:
    conn.execute("SELECT 1")  # the caller's transaction is open
    topic.apply(conn, [topic.prepare(1, 0)])
    topic.apply(conn, [topic.prepare(2, 1)])
    assert len(open_waits_in_transaction(conn, topic)) == 2
    conn.rollback()
    assert open_waits(conn, topic) == {}


def open_waits_in_transaction(conn: psycopg.Connection, topic: WaitTopic) -> list[Any]:
    return conn.execute("SELECT wait_id FROM wait WHERE wait_topic = %s", (topic.name,)).fetchall()


def test_a_large_batch_is_applied_in_full(conn: psycopg.Connection, topic: WaitTopic) -> None:
    batch = [topic.prepare(i, i) for i in range(10_000)]
    batch += [topic.tombstone(i, 10_000 + i) for i in range(0, 10_000, 2)]
    assert topic.apply(conn, batch) == MirrorResult(upserted=5_000, deleted=0, rejected=0)
    assert sorted(open_waits(conn, topic).values()) == list(range(1, 10_000, 2))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=4),
)
def test_any_batching_of_the_stream_converges_to_exactly_the_open_wait_ids(
    conn: psycopg.Connection,
    unique_name: Callable[[str], str],
    steps: list[tuple[int, bool]],
    cuts: list[int],
) -> None:
    topic = WaitTopic(unique_name("prop"))
    events = [
        topic.prepare(src, offset) if is_prepare else topic.tombstone(src, offset)
        for offset, (src, is_prepare) in enumerate(steps)
    ]
    bounds = [0, *sorted(c for c in cuts if c <= len(events)), len(events)]
    for start, end in itertools.pairwise(bounds):
        topic.apply(conn, events[start:end])
    last: dict[uuid.UUID, tuple[int, bool]] = {}
    for offset, (src, is_prepare) in enumerate(steps):
        last[topic.wait_id(src)] = (offset, is_prepare)
    expected = {wait_id: offset for wait_id, (offset, is_prepare) in last.items() if is_prepare}
    assert open_waits(conn, topic) == expected
