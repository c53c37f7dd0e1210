"""The connectors' pure parts: the mirror's planner (wait-topic records → one change per wait
id, or a reject), the expiry sweep's DLQ record of a row, and the registry listing's cell
formatting."""

from __future__ import annotations

import dataclasses
import itertools
import random
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.rows import (
    REJECT_COLUMNS,
    STAGE_COLUMNS,
    MirrorPlan,
    Reject,
    WaitDelete,
    WaitEvent,
    WaitUpsert,
    plan_batch,
    reject_values,
    stage_values,
    supersedes,
)
from connectors.source import EXPIRED_EXCEPTION, ExpiredWait, to_dlq, to_tombstone
from dispatcher.durations import format_age
from dispatcher.wire import (
    ORIGINAL_PARTITION,
    ORIGINAL_TOPIC,
    WAIT_EXPIRATION_TIME,
    WRITER_GENERATION,
    Headers,
    SourceRecord,
    decode_original_headers,
    encode_original_headers,
    parse_dlq_record,
    wait_id_for,
    wait_record,
    wait_tombstone,
    withdrawal_of,
)

pytestmark = pytest.mark.unit

STAGE_NAMES = [name for name, _ in STAGE_COLUMNS]
GROUP = "payments"
WAIT_TOPIC = "payments.wait"
DLQ = "payments.dlq"
EXPIRES = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def source(offset: int = 7, **changes: object) -> SourceRecord:
    fields: dict[str, object] = {
        "topic": "orders",
        "partition": 2,
        "offset": offset,
        "key": b"order-1",
        "value": b'{"amount": 10}',
        "headers": (("traceparent", b"00-abc"), ("bin", b"\xff\x00")),
        "timestamp_ms": 1_700_000_000_123,
    }
    fields.update(changes)
    return SourceRecord(**fields)  # type: ignore[arg-type]


def prepare(
    src: SourceRecord, wait_offset: int, *, topic: str = WAIT_TOPIC, group: str = GROUP
) -> WaitEvent:
    record = wait_record(src, group, EXPIRES)
    return WaitEvent(topic, 0, wait_offset, record.key, record.value, record.headers)


def tombstone(src: SourceRecord, wait_offset: int, *, topic: str = WAIT_TOPIC) -> WaitEvent:
    record = wait_tombstone(src, GROUP, EXPIRES)
    return WaitEvent(topic, 0, wait_offset, record.key, record.value, record.headers)


def plan(*events: WaitEvent, group: str | None = GROUP) -> MirrorPlan:
    return plan_batch(events, dlq_topic=DLQ, group=group)


def wait_id_of(src: SourceRecord) -> uuid.UUID:
    return wait_id_for(GROUP, src.topic, src.partition, src.offset)


def with_header(event: WaitEvent, name: str, value: bytes) -> WaitEvent:
    headers = tuple((n, value if n == name else v) for n, v in event.headers)
    return WaitEvent(
        event.wait_topic, event.partition, event.offset, event.key, event.value, headers
    )


def the_reject(result: MirrorPlan) -> Reject:
    assert not result.upserts
    assert not result.deletes
    (reject,) = result.rejects
    return reject


# --- one record ---------------------------------------------------------------------------


def test_prepare_becomes_an_upsert_carrying_the_original_record() -> None:
    src = source()
    result = plan(prepare(src, 41))
    assert result.upserts == (
        WaitUpsert(
            wait_topic=WAIT_TOPIC,
            wait_id=wait_id_of(src),
            wait_partition=0,
            wait_offset=41,
            wait_timestamp_ms=0,
            source=src,
            headers_json=encode_original_headers(src.headers),
            expires_at=EXPIRES,
            dlq_topic=DLQ,
            group=GROUP,
        ),
    )
    assert result.deletes == ()
    assert result.rejects == ()


def test_tombstone_becomes_a_delete_of_its_wait_id() -> None:
    src = source()
    result = plan(tombstone(src, 42))
    assert result.deletes == (WaitDelete(WAIT_TOPIC, wait_id_of(src), 0, 42, 0),)
    assert result.upserts == ()


def test_bare_tombstone_with_only_a_key_closes_the_wait() -> None:
    wait_id = wait_id_of(source())
    event = WaitEvent(WAIT_TOPIC, 3, 9, str(wait_id).encode(), None, ())
    assert plan(event).deletes == (WaitDelete(WAIT_TOPIC, wait_id, 3, 9, 0),)


def test_empty_body_is_a_prepare_not_a_tombstone() -> None:
    result = plan(prepare(source(value=b""), 1))
    assert result.upserts[0].source.value == b""


def test_group_defaults_to_the_wait_topic_prefix() -> None:
    result = plan(prepare(source(), 1), group=None)
    assert result.upserts[0].group == GROUP


# --- the highest offset per wait id wins --------------------------------------------------


def test_tombstone_after_prepare_in_one_batch_leaves_only_the_delete() -> None:
    src = source()
    result = plan(prepare(src, 1), tombstone(src, 2))
    assert result.upserts == ()
    assert result.deletes == (WaitDelete(WAIT_TOPIC, wait_id_of(src), 0, 2, 0),)


def test_re_prepare_after_tombstone_in_one_batch_deletes_then_upserts() -> None:
    """The tombstone is kept beside the later prepare: it closes a row an earlier batch left
    (a prepare of a higher generation would not be replaced by one of a lower)."""
    src = source()
    result = plan(prepare(src, 1), tombstone(src, 2), prepare(src, 3))
    assert [u.wait_offset for u in result.upserts] == [3]
    assert [d.wait_offset for d in result.deletes] == [2]
    assert [type(c) for c in result.changes()] == [WaitDelete, WaitUpsert]


def test_arrival_order_does_not_matter_only_offsets_do() -> None:
    src = source()
    assert plan(tombstone(src, 2), prepare(src, 1)) == plan(prepare(src, 1), tombstone(src, 2))


def test_the_same_record_twice_is_planned_once() -> None:
    event = prepare(source(), 5)
    assert len(plan(event, event).upserts) == 1


def test_one_change_per_wait_id_and_wait_topic() -> None:
    a, b = source(offset=1), source(offset=2)
    other_topic = "other.wait"
    result = plan(
        prepare(a, 1),
        prepare(b, 2),
        prepare(a, 3, topic=other_topic, group="other"),
        group=None,
    )
    assert sorted((u.wait_topic, u.wait_offset) for u in result.upserts) == [
        (other_topic, 3),
        (WAIT_TOPIC, 1),
        (WAIT_TOPIC, 2),
    ]


# --- rejects ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "null key"),
        (b"not-a-uuid", "not a UUID"),
        (b"\xff\xfe", "not a UUID"),
        # A fresh UUID each run, under a fixed id: pytest-xdist's workers must collect the same
        # test names.
        pytest.param(str(uuid.uuid4()).upper().encode(), "canonical", id="UPPER-CASE-canonical"),
    ],
)
def test_tombstone_with_a_bad_key_is_rejected(key: bytes | None, reason: str) -> None:
    event = WaitEvent(WAIT_TOPIC, 0, 1, key, None, ())
    assert reason in the_reject(plan(event)).reason


def test_prepare_without_headers_is_rejected() -> None:
    good = prepare(source(), 1)
    event = WaitEvent(WAIT_TOPIC, 0, 1, good.key, good.value, ())
    assert "missing" in the_reject(plan(event)).reason


def test_a_wait_id_not_derived_from_the_group_is_mirrored_and_flagged() -> None:
    # The reference design keys wait records with random UUIDs: mirrored, never rejected.
    event = prepare(source(), 1, group="someone-else")
    result = plan(event)
    assert not result.rejects
    (upsert,) = result.upserts
    assert event.key is not None and upsert.wait_id == uuid.UUID(event.key.decode())
    assert not upsert.derived
    assert plan(prepare(source(), 1)).upserts[0].derived


def test_no_group_and_a_wait_topic_not_named_group_dot_wait_is_rejected() -> None:
    event = prepare(source(), 1, topic="custom-waits")
    assert "no dispatcher group" in the_reject(plan(event, group=None)).reason


@pytest.mark.parametrize(
    ("header", "value", "reason"),
    [
        (ORIGINAL_PARTITION, b"2147483648", "ORIGINAL_PARTITION"),
        (ORIGINAL_TOPIC, b"or\x00ders", "NUL"),
        (ORIGINAL_TOPIC, b"", "empty"),
        (WAIT_EXPIRATION_TIME, b"0001-01-01T00:00:00+01:00", ""),
        (WAIT_EXPIRATION_TIME, b"tomorrow", "ISO-8601"),
    ],
)
def test_values_the_table_would_refuse_are_rejected(header: str, value: bytes, reason: str) -> None:
    event = with_header(prepare(source(), 1), header, value)
    assert reason in the_reject(plan(event)).reason


def test_a_rejected_record_does_not_hide_an_older_valid_one() -> None:
    src = source()
    good = prepare(src, 1)
    bad = with_header(prepare(src, 2), WAIT_EXPIRATION_TIME, b"garbage")
    result = plan(good, bad)
    assert [u.wait_offset for u in result.upserts] == [1]
    assert [r.event for r in result.rejects] == [bad]


# --- staging and reject rows --------------------------------------------------------------


def test_stage_values_follow_the_column_order_and_keep_headers_lossless() -> None:
    src = source(headers=(("dup", b"1"), ("dup", None), ("bin", b"\x80")))
    (upsert,) = plan(prepare(src, 4)).upserts
    row = dict(zip(STAGE_NAMES, stage_values(upsert), strict=True))
    assert row["wait_id"] == wait_id_of(src)
    assert row["is_tombstone"] is False
    assert row["original_key"] == src.key
    assert row["body"] == src.value
    assert row["original_timestamp_ms"] == src.timestamp_ms
    assert row["wait_expiration_time"] == EXPIRES
    assert decode_original_headers(str(row["original_headers"])) == src.headers


def test_stage_values_of_a_delete_carry_no_payload() -> None:
    (delete,) = plan(tombstone(source(), 4)).deletes
    row = dict(zip(STAGE_NAMES, stage_values(delete), strict=True))
    assert row["is_tombstone"] is True
    payload = [
        c
        for c in STAGE_NAMES
        if c not in {"wait_topic", "wait_id", "wait_partition", "wait_offset", "wait_timestamp_ms",
                     "is_tombstone"}
    ]
    assert all(row[c] is None for c in payload)


# --- trace headers: a traced record's prepare → the row → the expiry's DLQ record ----------

TRACE: Headers = (
    ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ("tracestate", b"vendor=7"),
)


def traced(event: WaitEvent) -> WaitEvent:
    """`event` as a traced record's prepare: its record span's W3C headers after ours."""
    return dataclasses.replace(event, headers=(*event.headers, *TRACE))


def test_a_traced_prepares_trace_headers_are_staged_apart_from_the_originals() -> None:
    src = source()  # its own headers hold the producer's traceparent
    (upsert,) = plan(traced(prepare(src, 4))).upserts
    row = dict(zip(STAGE_NAMES, stage_values(upsert), strict=True))
    assert decode_original_headers(str(row["trace_headers"])) == TRACE
    assert decode_original_headers(str(row["original_headers"])) == src.headers


def test_an_untraced_prepare_stages_no_trace_headers() -> None:
    (upsert,) = plan(prepare(source(), 4)).upserts
    assert dict(zip(STAGE_NAMES, stage_values(upsert), strict=True))["trace_headers"] is None


def expired(src: SourceRecord, trace_headers: Headers = ()) -> ExpiredWait:
    return ExpiredWait(wait_topic=WAIT_TOPIC, wait_id=wait_id_of(src), wait_partition=0,
                       wait_offset=4, source=src, expires_at=EXPIRES, dlq_topic=DLQ,
                       group=GROUP, trace_headers=trace_headers)


def test_an_expirys_dlq_record_continues_the_trace_its_wait_record_kept() -> None:
    """The sweep's DLQ record replaces the producer's W3C headers with the record span's, as the
    pod's DLQ records do; the other original headers stay, in their order."""
    src = source(headers=(("traceparent", b"00-producer"), ("tenant", b"acme"),
                          ("tracestate", b"producer=1")))
    topic, record = to_dlq(expired(src, TRACE))
    entry = parse_dlq_record(record.key, record.value, record.headers)
    assert topic == DLQ
    assert entry.source == dataclasses.replace(src, headers=(("tenant", b"acme"), *TRACE))
    assert entry.failure.exception == EXPIRED_EXCEPTION
    assert record.headers[:3] == (("tenant", b"acme"), *TRACE)  # what a tracer reads first


def test_the_sweeps_tombstone_of_a_traced_wait_has_exactly_its_prepares_headers() -> None:
    src = source()
    event = traced(prepare(src, 4))
    partition, tombstone = to_tombstone(expired(src, TRACE))
    assert (partition, tombstone.key, tombstone.value, tombstone.headers) == (
        event.partition, event.key, None, tuple(event.headers))


def test_an_untraced_expirys_dlq_record_keeps_the_original_headers() -> None:
    src = source(headers=(("traceparent", b"00-producer"), ("tenant", b"acme")))
    _, record = to_dlq(expired(src))
    assert parse_dlq_record(record.key, record.value, record.headers).source == src


def test_reject_values_keep_the_record_verbatim_and_escape_nul() -> None:
    headers: Headers = (("h", b"\x00\xff"), ("h", None))
    event = WaitEvent(WAIT_TOPIC, 1, 2, b"k\x00", b"v", headers)
    row = dict(
        zip(REJECT_COLUMNS, reject_values(Reject(event, "bad \x00 key"), GROUP), strict=True)
    )
    assert (row["record_key"], row["record_value"]) == (b"k\x00", b"v")
    assert decode_original_headers(str(row["record_headers"])) == headers
    assert row["reason"] == "bad \\x00 key"


# --- property: any batching of an ordered stream converges to the open wait ids ----------


@dataclass(frozen=True)
class Step:
    """One wait-topic record of the generated stream: which source, prepare or tombstone."""

    source_offset: int
    is_prepare: bool
    valid: bool


def build_stream(steps: list[Step]) -> list[WaitEvent]:
    events: list[WaitEvent] = []
    for wait_offset, step in enumerate(steps):
        src = source(offset=step.source_offset)
        event = prepare(src, wait_offset) if step.is_prepare else tombstone(src, wait_offset)
        if not step.valid:
            event = WaitEvent(WAIT_TOPIC, 0, wait_offset, b"garbage", event.value, event.headers)
        events.append(event)
    return events


def apply_to_model(state: dict[uuid.UUID, int], result: MirrorPlan) -> None:
    """The merge rule sink.py runs in SQL, deletes first: only a higher wait offset changes a
    row."""
    for delete in result.deletes:
        if state.get(delete.wait_id, delete.wait_offset) < delete.wait_offset:
            del state[delete.wait_id]
    for upsert in result.upserts:
        if state.get(upsert.wait_id, -1) < upsert.wait_offset:
            state[upsert.wait_id] = upsert.wait_offset


steps_strategy = st.lists(
    st.builds(Step, st.integers(0, 4), st.booleans(), st.booleans() | st.just(True)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps_strategy, cuts=st.lists(st.integers(0, 40), max_size=6), replay=st.booleans())
def test_any_batching_converges_to_the_last_valid_record_per_wait_id(
    steps: list[Step], cuts: list[int], replay: bool
) -> None:
    events = build_stream(steps)
    bounds = [0, *sorted(c for c in cuts if c <= len(events)), len(events)]
    batches = [events[a:b] for a, b in itertools.pairwise(bounds)]
    if replay:  # a crashed micro-batch is applied again
        batches = [b for batch in batches for b in (batch, batch)]
    state: dict[uuid.UUID, int] = {}
    rejected = 0
    for batch in batches:
        result = plan(*batch)
        for changes in (result.deletes, result.upserts):  # at most one of each per wait id
            ids = [c.wait_id for c in changes]
            assert len(ids) == len(set(ids))
        rejected += len(result.rejects)
        apply_to_model(state, result)

    expected: dict[uuid.UUID, int] = {}
    for wait_offset, step in enumerate(steps):
        if step.valid:
            wait_id = wait_id_of(source(offset=step.source_offset))
            expected[wait_id] = wait_offset if step.is_prepare else -1
    assert state == {k: v for k, v in expected.items() if v >= 0}
    assert rejected == sum(not s.valid for s in steps) * (2 if replay else 1)


# --- generations: a late prepare of an owner before, and its withdrawal --------------------


def prepared_by(src: SourceRecord, wait_offset: int, generation: int | None) -> WaitEvent:
    record = wait_record(src, GROUP, EXPIRES, generation=generation)
    return WaitEvent(WAIT_TOPIC, 0, wait_offset, record.key, record.value, record.headers)


def withdrawn_by(src: SourceRecord, wait_offset: int, generation: int) -> WaitEvent:
    record = withdrawal_of(wait_record(src, GROUP, EXPIRES, generation=generation))
    return WaitEvent(WAIT_TOPIC, 0, wait_offset, record.key, record.value, record.headers)


def test_a_prepare_of_a_lower_generation_never_replaces_a_higher_ones() -> None:
    src = source()
    result = plan(prepared_by(src, 1, 8), prepared_by(src, 2, 7))
    assert [(u.wait_offset, u.generation) for u in result.upserts] == [(1, 8)]
    assert supersedes(plan(prepared_by(src, 1, 8)).upserts[0],
                      plan(prepared_by(src, 2, 7)).upserts[0])  # a higher one, lower offset


def test_a_prepare_without_a_generation_is_ordered_by_its_offset() -> None:
    src = source()
    assert [u.wait_offset for u in plan(prepared_by(src, 1, 8), prepared_by(src, 2, None)
                                        ).upserts] == [2]


def test_a_withdrawal_is_planned_after_the_batch_with_its_generation() -> None:
    src = source()
    result = plan(prepared_by(src, 1, 8), tombstone(src, 2), prepared_by(src, 3, 7),
                  withdrawn_by(src, 4, 7))
    assert [d.wait_offset for d in result.deletes] == [2]
    assert [u.wait_offset for u in result.upserts] == [3]
    assert [(w.wait_offset, w.generation) for w in result.withdrawals] == [(4, 7)]


def test_a_withdrawal_before_a_tombstone_is_dropped_with_what_it_withdrew() -> None:
    src = source()
    result = plan(prepared_by(src, 1, 7), withdrawn_by(src, 2, 7), tombstone(src, 3))
    assert result.withdrawals == ()
    assert [d.wait_offset for d in result.deletes] == [3]


def test_a_withdrawal_without_its_generation_is_rejected() -> None:
    src = source()
    event = withdrawn_by(src, 4, 7)
    bare = dataclasses.replace(event, headers=tuple(
        (n, v) for n, v in event.headers if n != WRITER_GENERATION))
    assert "needs its WAITLINE_GENERATION" in the_reject(plan(bare)).reason


def test_a_withdrawal_stages_nothing_and_a_prepare_stages_its_generation() -> None:
    src = source()
    (upsert,) = plan(prepared_by(src, 1, 7)).upserts
    assert stage_values(upsert)[STAGE_NAMES.index("writer_generation")] == 7
    assert list(plan(withdrawn_by(src, 2, 7)).changes()) == []


Row = tuple[int, int | None]  # (wait offset, generation) of an open row


def _apply(rows: dict[uuid.UUID, Row], result: MirrorPlan) -> None:
    """What sink.py's SQL does with a plan: deletes, upserts, then withdrawals."""
    def later(offset: int, generation: int | None, row: Row) -> bool:
        if generation is not None and row[1] is not None and generation != row[1]:
            return generation > row[1]
        return offset > row[0]

    for delete in result.deletes:
        if (row := rows.get(delete.wait_id)) is not None and delete.wait_offset > row[0]:
            del rows[delete.wait_id]
    for upsert in result.upserts:
        row = rows.get(upsert.wait_id)
        if row is None or later(upsert.wait_offset, upsert.generation, row):
            rows[upsert.wait_id] = (upsert.wait_offset, upsert.generation)
    for withdrawal in result.withdrawals:
        if (row := rows.get(withdrawal.wait_id)) is not None and row[1] == withdrawal.generation:
            del rows[withdrawal.wait_id]


owner_writes = st.lists(st.tuples(st.sampled_from(["prepare", "tombstone", "withdraw"]),
                                  st.integers(1, 3)), max_size=14)


@settings(max_examples=400, deadline=None)
@given(writes=owner_writes, cuts=st.lists(st.integers(0, 14), max_size=5))
def test_any_batching_keeps_open_what_one_by_one_keeps_open(
    writes: list[tuple[str, int]], cuts: list[int]
) -> None:
    """One wait id's prepares (by generation), tombstones and withdrawals, in any order and any
    split into batches: a row the record-by-record mirror leaves open for an owner that may be
    calling the record is open after the batched one too, from that generation or a higher
    one. Batching may close, or leave open, a row of an owner that left the record uncalled:
    either is safe."""
    src = source()
    events = []
    for offset, (kind, generation) in enumerate(writes):
        if kind == "prepare":
            events.append(prepared_by(src, offset, generation))
        elif kind == "tombstone":
            events.append(tombstone(src, offset))
        else:
            events.append(withdrawn_by(src, offset, generation))
    # Owners that left the record uncalled: those that withdrew, and those whose prepare lands
    # after a newer owner's withdrawal (it was under way when their revoke gave up on it, and
    # they withdraw it once acknowledged).
    left = {generation for kind, generation in writes if kind == "withdraw"}
    for index, (kind, generation) in enumerate(writes):
        if kind == "prepare" and any(k == "withdraw" and g > generation
                                     for k, g in writes[:index]):
            left.add(generation)
    one_by_one: dict[uuid.UUID, Row] = {}
    for event in events:
        _apply(one_by_one, plan(event))
    bounds = [0, *sorted(c for c in cuts if c <= len(events)), len(events)]
    batched: dict[uuid.UUID, Row] = {}
    for a, b in itertools.pairwise(bounds):
        _apply(batched, plan(*events[a:b]))
    for wait_id, (_offset, generation) in one_by_one.items():
        if generation in left:
            continue
        assert wait_id in batched
        assert (batched[wait_id][1] or 0) >= (generation or 0)


# --- property: a wait id's records in several partitions (the wait topic grew) -------------


def _located(event: WaitEvent, partition: int, at_ms: int) -> WaitEvent:
    return dataclasses.replace(event, partition=partition, timestamp_ms=at_ms)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 3)),
                      min_size=1, max_size=12),
       order=st.randoms(use_true_random=False))
def test_the_latest_record_wins_whatever_order_the_partitions_arrive_in(
    steps: list[tuple[int, bool, int]], order: random.Random
) -> None:
    """One wait id's records spread over partitions, timestamps rising with each partition's
    offsets (as one writer's clock does): in any order of arrival the plan keeps the record
    latest by (timestamp, partition, offset) — by time across partitions, by offset within."""
    src = source()
    next_offset: Counter[int] = Counter()
    events = []
    clock = 1_700_000_000_000
    for partition, is_prepare, tick in steps:
        clock += tick  # may stand still: equal timestamps in two partitions
        offset = next_offset[partition] * 7 + 100 * (3 - partition)  # unrelated across partitions
        next_offset[partition] += 1
        event = prepare(src, offset) if is_prepare else tombstone(src, offset)
        events.append(_located(event, partition, clock))
    latest = max(events, key=lambda e: (e.timestamp_ms, e.partition, e.offset))
    order.shuffle(events)
    *before, change = plan(*events).changes()
    assert (change.wait_partition, change.wait_offset) == (latest.partition, latest.offset)
    # at most the latest tombstone before it, which closes what an earlier batch left open
    assert [type(c) for c in before] in ([], [WaitDelete])
    assert all(supersedes(change, c) for c in before)


def test_within_a_partition_the_offset_wins_over_a_clock_that_went_back() -> None:
    src = source()
    older = _located(prepare(src, 5), 1, 2_000)
    newer = _located(tombstone(src, 6), 1, 1_000)
    assert plan(newer, older).deletes == (WaitDelete(WAIT_TOPIC, wait_id_of(src), 1, 6, 1_000),)
    assert supersedes(plan(newer).deletes[0], plan(older).upserts[0])
    assert not supersedes(plan(older).upserts[0], plan(newer).deletes[0])


# --- registry listing cells ---------------------------------------------------------------


def test_ages_are_compact_and_never_negative() -> None:
    assert [format_age(s) for s in (-3, 0, 59.9, 61, 3_661, 90_000)] == [
        "0s", "0s", "59s", "1m01s", "1h01m", "1d01h",
    ]  # fmt: skip


