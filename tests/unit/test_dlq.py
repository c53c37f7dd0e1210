"""The DLQ tools' pure core: filters, selection, replay planning, the replay ledger, previews."""

from __future__ import annotations

import json
import random
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher import wire
from dispatcher.dlq.ledger import (
    LedgerEntry,
    ReplayLedger,
    ledger_record,
    ledger_topic_for,
    parse_ledger_record,
)
from dispatcher.dlq.plan import ReplayPlan, ReplayPlanner, ReplayRequest, Verdict
from dispatcher.dlq.records import (
    DlqCoordinates,
    DlqFilter,
    DlqRecord,
    bytes_json,
    original_record,
    resolve_dlq_topic,
)
from dispatcher.dlq.rows import DlqRow, DlqStats, OldestFirst
from dispatcher.errors import ConfigError, WireFormatError
from dispatcher.previews import preview_bytes
from dispatcher.wire import IDEMPOTENCY_KEY, Failure, SourceRecord

pytestmark = pytest.mark.unit

GROUP = "payments"
TIMEOUT = Failure("TimeoutError", "no answer within 60 s", "Traceback…\nTimeoutError")
HTTP_500 = Failure("HTTPStatusError", "500 Internal Server Error")


def source(topic: str = "orders", offset: int = 0, *, key: bytes | None = b"k",
           value: bytes | None = b"v", headers: wire.Headers = ()) -> SourceRecord:
    return SourceRecord(topic, 0, offset, key, value, headers, 1_700_000_000_000 + offset)


def dlq_record(at: int, original: SourceRecord | None = None, failure: Failure = TIMEOUT, *,
               partition: int = 0, timestamp_ms: int | None = None) -> DlqRecord:
    """The DLQ record at `partition/at` for `original`, written at `timestamp_ms`."""
    original = original or source(offset=at)
    out = wire.dlq_record(original, GROUP, failure)
    return DlqRecord.parse(DlqCoordinates(partition, at),
                           1_800_000_000_000 + at if timestamp_ms is None else timestamp_ms,
                           out.key, out.value, out.headers)


def malformed(at: int) -> DlqRecord:
    return DlqRecord.parse(DlqCoordinates(0, at), 1_800_000_000_000 + at, b"k", b"v",
                           [("Exception", b"X")])


def replayed(ledger: ReplayLedger, plan: ReplayPlan) -> None:
    """Record every item of `plan` in `ledger`, as a committed replay does."""
    for n, item in enumerate(plan.items):
        ledger.add(LedgerEntry(item.coordinates, item.timestamp_ms, item.target_topic, 0, n, 1))


def test_dlq_topic_is_the_explicit_one_else_the_groups() -> None:
    assert resolve_dlq_topic("g", "custom.dlq") == "custom.dlq"
    assert resolve_dlq_topic("g", None) == "g.dlq"
    with pytest.raises(ConfigError, match="--group GROUP"):
        resolve_dlq_topic(None, None)


def test_ledger_topic_is_named_after_the_dlq_and_fits_kafkas_limit() -> None:
    assert ledger_topic_for("g.dlq") == "g.dlq.replayed"
    assert len(ledger_topic_for("d" * 240)) == 249
    with pytest.raises(ConfigError, match="at most 249"):
        ledger_topic_for("d" * 241)


def test_parse_keeps_a_malformed_record_with_its_problem() -> None:
    record = malformed(3)
    assert record.entry is None
    assert record.problem is not None
    assert "ORIGINAL_HEADERS" in record.problem
    with pytest.raises(WireFormatError, match="0/3 is malformed"):
        original_record(record)


@pytest.mark.parametrize(
    "original",
    [
        source(key=None),
        source(key=b"\xff\x00binary"),
        source(value=b""),
        source(value=None),
        source(headers=(("trace", b"\x00\xff"), ("trace", b"again"), ("nullable", None))),
        source(headers=(("Exception", b"theirs"), ("ORIGINAL_TOPIC", b"spoof"))),
    ],
    ids=["null-key", "binary-key", "empty-value", "null-value", "binary-repeated-null-headers",
         "headers-named-like-ours"],
)
def test_original_record_is_the_original_exactly_plus_its_idempotency_key(
    original: SourceRecord,
) -> None:
    record = dlq_record(0, original)
    assert record.entry is not None and record.entry.wait_id is not None
    rebuilt = original_record(record)
    assert (rebuilt.key, rebuilt.value, rebuilt.headers) == (
        original.key, original.value,
        (*original.headers, (IDEMPOTENCY_KEY, str(record.entry.wait_id).encode())))


def test_a_replay_of_a_replay_keeps_the_first_idempotency_key() -> None:
    replayed = source(headers=(("trace", b"t"), (IDEMPOTENCY_KEY, b"first-call-key")))
    rebuilt = original_record(dlq_record(0, replayed))
    assert rebuilt.headers == (("trace", b"t"), (IDEMPOTENCY_KEY, b"first-call-key"))


def test_empty_filter_matches_everything_including_malformed() -> None:
    assert DlqFilter().matches(dlq_record(0))
    assert DlqFilter().matches(malformed(1))
    assert DlqFilter().describe() == "all records"


def test_filter_criteria_must_all_hold() -> None:
    timeout_orders = dlq_record(0, source("orders"), TIMEOUT)
    http_orders = dlq_record(1, source("orders"), HTTP_500)
    timeout_refunds = dlq_record(2, source("refunds"), TIMEOUT)
    both = DlqFilter(exceptions=frozenset({"TimeoutError"}),
                     original_topics=frozenset({"orders"}))
    assert [both.matches(r) for r in (timeout_orders, http_orders, timeout_refunds)] == [
        True, False, False]
    either_exception = DlqFilter(exceptions=frozenset({"TimeoutError", "HTTPStatusError"}))
    assert all(either_exception.matches(r) for r in (timeout_orders, http_orders))


def test_wait_id_filter_selects_that_records_entries() -> None:
    record = dlq_record(0)
    wait_id = record.entry.wait_id if record.entry else None
    assert wait_id == wire.wait_id_for(GROUP, "orders", 0, 0)
    assert DlqFilter(wait_ids=frozenset({wait_id})).matches(record)
    assert not DlqFilter(wait_ids=frozenset({uuid.uuid4()})).matches(record)


def test_since_bound_is_inclusive_and_applies_to_dlq_time() -> None:
    record = dlq_record(0, timestamp_ms=5_000)
    assert DlqFilter(since_ms=5_000).matches(record)
    assert not DlqFilter(since_ms=5_001).matches(record)


def test_malformed_records_match_time_filters_but_not_entry_filters() -> None:
    record = malformed(0)
    assert DlqFilter(since_ms=0).matches(record)
    assert not DlqFilter(exceptions=frozenset({"TimeoutError"})).matches(record)
    assert not DlqFilter(original_topics=frozenset({"orders"})).matches(record)


def test_filter_describes_itself() -> None:
    text = DlqFilter(exceptions=frozenset({"B", "A"}), original_topics=frozenset({"orders"}),
                     since_ms=0).describe()
    assert text == ("exception A or B, original topic orders, "
                    "written since 1970-01-01T00:00:00.000Z")


ledger_entries = st.builds(
    LedgerEntry,
    dlq=st.builds(DlqCoordinates, st.integers(0, 2**31 - 1), st.integers(0, 2**62)),
    dlq_timestamp_ms=st.integers(-(2**40), 2**50),
    target_topic=st.text(alphabet="abcXYZ09._-", min_size=1, max_size=40),
    target_partition=st.integers(0, 2**31 - 1),
    target_offset=st.integers(0, 2**62),
    replayed_at_ms=st.integers(0, 2**50),
)


@given(ledger_entries)
def test_ledger_entries_round_trip(entry: LedgerEntry) -> None:
    record = ledger_record(entry)
    assert parse_ledger_record(record.value) == entry
    assert record.key == f"{entry.dlq.partition}/{entry.dlq.offset}/{entry.target_topic}".encode()


@pytest.mark.parametrize("value", [None, b"", b"not json", b"[]", b'{"dlq_partition": 0}',
                                   json.dumps({"dlq_partition": True, "dlq_offset": 1,
                                               "dlq_timestamp_ms": 1, "target_topic": "t",
                                               "target_partition": 0, "target_offset": 0,
                                               "replayed_at_ms": 0}).encode()])
def test_foreign_ledger_records_are_refused(value: bytes | None) -> None:
    with pytest.raises(WireFormatError, match="not a replay ledger entry"):
        parse_ledger_record(value)


def test_ledger_knows_replays_per_record_and_target() -> None:
    record = dlq_record(7, timestamp_ms=100)
    ledger = ReplayLedger([LedgerEntry(DlqCoordinates(0, 7), 100, "staging", 0, 0, 1)])
    assert ledger.was_replayed(record, "staging")
    assert not ledger.was_replayed(record, "orders")
    ledger.add(LedgerEntry(DlqCoordinates(0, 7), 100, "orders", 1, 5, 2))
    assert [e.target_topic for e in ledger.replays_of(record)] == ["staging", "orders"]
    assert len(ledger) == 2


def test_a_recreated_dlq_record_at_a_replayed_offset_is_not_replayed() -> None:
    ledger = ReplayLedger([LedgerEntry(DlqCoordinates(0, 7), 100, "orders", 0, 0, 1)])
    assert not ledger.was_replayed(dlq_record(7, timestamp_ms=101), "orders")


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), max_size=60, unique=True),
       st.one_of(st.none(), st.integers(1, 10)), st.randoms())
def test_oldest_first_keeps_the_oldest_in_order(
    positions: list[tuple[int, int]], limit: int | None, shuffler: random.Random
) -> None:
    records = [dlq_record(offset, partition=partition, timestamp_ms=offset // 3)
               for offset, partition in positions]
    shuffler.shuffle(records)
    kept: OldestFirst[DlqRecord] = OldestFirst(limit)
    for record in records:
        kept.offer(record, record)
    expected = sorted(records, key=DlqRecord.sort_key)[:limit]
    assert kept.items() == expected
    assert kept.offered == len(records)


def test_oldest_first_refuses_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        OldestFirst(0)


def plan_of(records: list[DlqRecord], request: ReplayRequest | None = None,
            ledger: ReplayLedger | None = None, preview_limit: int = 50) -> ReplayPlan:
    planner = ReplayPlanner(request or ReplayRequest(), ledger or ReplayLedger(), preview_limit)
    for record in records:
        planner.consider(record)
    return planner.plan()


def test_plan_selects_matches_and_counts_the_rest() -> None:
    ledger = ReplayLedger()
    already = dlq_record(0, source("orders", 0))
    ledger.add(LedgerEntry(already.coordinates, already.timestamp_ms, "orders", 0, 0, 1))
    records = [already, dlq_record(1, source("orders", 1)), dlq_record(2, source("refunds", 2)),
               malformed(3), dlq_record(4, source("orders", 4), HTTP_500)]
    request = ReplayRequest(DlqFilter(exceptions=frozenset({"TimeoutError"})))
    plan = plan_of(records, request, ledger)
    assert [(i.coordinates.offset, i.target_topic) for i in plan.items] == [
        (1, "orders"), (2, "refunds")]
    assert (plan.already_replayed, plan.not_matching, plan.malformed, plan.over_limit) == (
        1, 2, 0, 0)
    assert plan.by_target() == {"orders": 1, "refunds": 1}


def test_planner_reports_each_verdict() -> None:
    ledger = ReplayLedger()
    done = dlq_record(0)
    ledger.add(LedgerEntry(done.coordinates, done.timestamp_ms, "orders", 0, 0, 1))
    planner = ReplayPlanner(ReplayRequest(), ledger, 10)
    assert planner.consider(done) is Verdict.ALREADY_REPLAYED
    assert planner.consider(dlq_record(1)) is Verdict.SELECTED
    assert planner.consider(malformed(2)) is Verdict.MALFORMED
    narrow = ReplayPlanner(ReplayRequest(DlqFilter(original_topics=frozenset({"x"}))), ledger, 10)
    assert narrow.consider(dlq_record(3)) is Verdict.NOT_MATCHING


def test_include_replayed_replays_again_deliberately() -> None:
    record = dlq_record(0)
    ledger = ReplayLedger([LedgerEntry(record.coordinates, record.timestamp_ms, "orders", 0, 0,
                                       1)])
    assert plan_of([record], ReplayRequest(), ledger).items == ()
    assert len(plan_of([record], ReplayRequest(include_replayed=True), ledger).items) == 1


def test_to_topic_retargets_and_is_tracked_separately() -> None:
    record = dlq_record(0)
    ledger = ReplayLedger([LedgerEntry(record.coordinates, record.timestamp_ms, "orders", 0, 0,
                                       1)])
    plan = plan_of([record], ReplayRequest(to_topic="staging"), ledger)
    assert [item.target_topic for item in plan.items] == ["staging"]
    replayed(ledger, plan)
    assert plan_of([record], ReplayRequest(to_topic="staging"), ledger).items == ()


def test_limit_keeps_the_oldest_matches_and_counts_the_rest() -> None:
    records = [dlq_record(n, timestamp_ms=1_000 - n) for n in range(10)]
    plan = plan_of(records, ReplayRequest(limit=3), preview_limit=2)
    assert [item.coordinates.offset for item in plan.items] == [9, 8, 7]
    assert plan.over_limit == 7
    assert [row.coordinates for row in plan.preview] == [i.coordinates for i in plan.items[:2]]


def test_preview_never_exceeds_the_plan() -> None:
    records = [dlq_record(n) for n in range(5)]
    plan = plan_of(records, ReplayRequest(limit=2), preview_limit=50)
    assert [row.coordinates for row in plan.preview] == [i.coordinates for i in plan.items]


def test_a_filtered_replay_leaves_the_rest_for_a_later_replay_exactly_once() -> None:
    records = [dlq_record(n, source("orders", n), TIMEOUT if n % 2 else HTTP_500)
               for n in range(10)]
    ledger = ReplayLedger()
    only_timeouts = plan_of(records,
                            ReplayRequest(DlqFilter(exceptions=frozenset({"TimeoutError"}))),
                            ledger)
    assert [i.coordinates.offset for i in only_timeouts.items] == [1, 3, 5, 7, 9]
    replayed(ledger, only_timeouts)
    rest = plan_of(records, ReplayRequest(), ledger)
    assert [i.coordinates.offset for i in rest.items] == [0, 2, 4, 6, 8]
    assert rest.already_replayed == 5
    replayed(ledger, rest)
    assert plan_of(records, ReplayRequest(), ledger).items == ()


def test_plan_offset_ranges_cover_each_partitions_items() -> None:
    records = [dlq_record(5, partition=0), dlq_record(9, partition=0),
               dlq_record(2, partition=3)]
    assert plan_of(records).offset_ranges() == {0: (5, 10), 3: (2, 3)}


def test_item_for_recognises_only_the_planned_record() -> None:
    planned = dlq_record(4, timestamp_ms=100)
    plan = plan_of([planned])
    assert plan.item_for(planned) == plan.items[0]
    assert plan.item_for(dlq_record(4, timestamp_ms=101)) is None
    assert plan.item_for(dlq_record(5, timestamp_ms=100)) is None


def test_stats_count_by_exception_topic_replay_and_time() -> None:
    records = [dlq_record(0, source("orders"), TIMEOUT, timestamp_ms=30),
               dlq_record(1, source("orders"), HTTP_500, timestamp_ms=10),
               dlq_record(2, source("refunds"), TIMEOUT, timestamp_ms=20),
               malformed(3)]
    ledger = ReplayLedger([LedgerEntry(records[0].coordinates, 30, "orders", 0, 0, 1)])
    totals = DlqStats()
    for record in records:
        totals.add(record, ledger)
    summary = totals.to_json()
    assert summary["total"] == 4
    assert summary["malformed"] == 1
    assert (summary["replayed"], summary["not_replayed"]) == (1, 3)
    assert summary["by_exception"] == {"TimeoutError": 2, "HTTPStatusError": 1}
    assert summary["by_original_topic"] == {"orders": 2, "refunds": 1}
    assert summary["oldest"] == "1970-01-01T00:00:00.010Z"
    assert summary["newest"] == "2027-01-15T08:00:00.003Z"


def test_row_json_names_the_record_and_its_replays() -> None:
    record = dlq_record(2, source("orders", 2, key=b"\xff"), TIMEOUT)
    ledger = ReplayLedger([LedgerEntry(record.coordinates, record.timestamp_ms, "orders", 0, 0,
                                       1)])
    row = DlqRow.of(record, ledger).to_json()
    assert row["dlq_offset"] == 2
    assert row["exception"] == "TimeoutError"
    assert (row["original_topic"], row["original_offset"]) == ("orders", 2)
    assert row["key"] == "base64:/w=="
    assert row["value_size"] == 1
    assert row["replayed_to"] == ["orders"]
    assert DlqRow.of(malformed(0), ledger).to_json()["malformed"] is True


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (None, "(null)"),
        (b"", "(empty)"),
        (b"order 42", "order 42"),
        (b"line one\nline two", "line one line two"),
        (b"\x00\x01\xff", "0x0001ff"),
        (b"a" * 50, "a" * 39 + "…"),
        ("é".encode() * 100, "é" * 39 + "…"),
        (b"\x1b[31mred", "0x1b5b33316d726564"),
        (bytes(range(40)), "0x" + bytes(range(19)).hex()[:37] + "…"),
    ],
)
def test_preview_bytes(data: bytes | None, shown: str) -> None:
    assert preview_bytes(data) == shown
    assert len(preview_bytes(data)) <= 40


def test_bytes_json_is_lossless() -> None:
    assert bytes_json(None) is None
    assert bytes_json(b"text") == {"utf8": "text"}
    assert bytes_json(b"\xff") == {"base64": "/w=="}


def test_still_due_drops_items_replayed_since_the_plan_was_made() -> None:
    records = [dlq_record(n) for n in range(3)]
    ledger = ReplayLedger()
    plan = plan_of(records, ReplayRequest(), ledger)
    meanwhile = plan_of(records[:1], ReplayRequest(), ledger)
    replayed(ledger, meanwhile)
    due = plan.still_due(ledger)
    assert [item.coordinates.offset for item in due.items] == [1, 2]
    assert due.replayed_meanwhile == 1
    assert due.still_due(ledger) == due


def test_still_due_honours_a_deliberate_replay_again() -> None:
    record = dlq_record(0)
    ledger = ReplayLedger([LedgerEntry(record.coordinates, record.timestamp_ms, "orders", 0, 0,
                                       1)])
    plan = plan_of([record], ReplayRequest(include_replayed=True), ledger)
    assert plan.items[0].replays_before == 1
    assert plan.still_due(ledger).items == plan.items
    replayed(ledger, plan)
    assert plan.still_due(ledger).items == ()
