"""A replay sends each wait id once (issue 9, defect 6): planning and the ledger's wait ids."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher import wire
from dispatcher.dlq.ledger import LedgerEntry, ReplayLedger, ledger_record, parse_ledger_record
from dispatcher.dlq.plan import ReplayPlan, ReplayPlanner, ReplayRequest, Verdict
from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.wire import Failure, SourceRecord

pytestmark = pytest.mark.unit

GROUP = "payments"
EXPIRED = Failure("ExpiredRecordException", "expired")


def original(offset: int, topic: str = "orders") -> SourceRecord:
    return SourceRecord(topic, 0, offset, b"k", b"v", (), 1_700_000_000_000)


def dlq_record(source: SourceRecord, partition: int, offset: int, timestamp_ms: int) -> DlqRecord:
    out = wire.dlq_record(source, GROUP, EXPIRED)
    return DlqRecord.parse(DlqCoordinates(partition, offset), timestamp_ms, out.key, out.value,
                           out.headers)


def wait_id(record: DlqRecord) -> uuid.UUID | None:
    return None if record.entry is None else record.entry.wait_id


def plan_of(records: list[DlqRecord], request: ReplayRequest | None = None,
            ledger: ReplayLedger | None = None) -> ReplayPlan:
    planner = ReplayPlanner(request or ReplayRequest(), ledger or ReplayLedger(), 50)
    for record in records:
        planner.consider(record)
    return planner.plan()


def test_the_oldest_record_of_a_wait_id_is_sent_once() -> None:
    late, early = dlq_record(original(1), 0, 0, 2_000), dlq_record(original(1), 1, 0, 1_000)
    plan = plan_of([late, early])  # read partition 0 first: the older record comes second
    assert [item.coordinates for item in plan.items] == [early.coordinates]
    assert plan.items[0].wait_id == wait_id(early)
    assert (plan.duplicate_wait_id, plan.already_replayed) == (1, 0)
    assert [row.coordinates for row in plan.preview] == [early.coordinates]


def test_force_sends_every_record_of_a_wait_id() -> None:
    records = [dlq_record(original(1), 0, 0, 1_000), dlq_record(original(1), 1, 0, 2_000)]
    plan = plan_of(records, ReplayRequest(force=True))
    assert len(plan.items) == 2
    assert plan.duplicate_wait_id == 0


def test_a_wait_id_in_the_ledger_counts_as_replayed() -> None:
    again = dlq_record(original(1), 0, 5, 9_000)
    ledger = ReplayLedger([LedgerEntry(DlqCoordinates(1, 0), 1_000, "orders", 0, 0, 1,
                                       wait_id(again))])
    plan = plan_of([again], ledger=ledger)
    assert (plan.items, plan.already_replayed) == ((), 1)
    assert len(plan_of([again], ReplayRequest(to_topic="staging"), ledger).items) == 1
    assert len(plan_of([again], ReplayRequest(force=True), ledger).items) == 1


def test_a_replayed_record_without_a_wait_id_in_its_entry_still_marks_its_wait_id() -> None:
    """Entries written before the ledger kept wait ids: the replayed DLQ record tells."""
    replayed = dlq_record(original(1), 1, 0, 1_000)
    later = dlq_record(original(1), 0, 7, 5_000)
    ledger = ReplayLedger([LedgerEntry(replayed.coordinates, 1_000, "orders", 0, 0, 1)])
    plan = plan_of([later, replayed], ledger=ledger)
    assert (plan.items, plan.already_replayed) == ((), 2)


def test_still_due_drops_a_wait_id_replayed_meanwhile() -> None:
    record = dlq_record(original(1), 0, 0, 1_000)
    plan = plan_of([record])
    other = LedgerEntry(DlqCoordinates(1, 3), 2_000, "orders", 0, 0, 1, wait_id(record))
    assert plan.still_due(ReplayLedger([other])).items == ()
    forced = plan_of([record], ReplayRequest(force=True))
    assert len(forced.still_due(ReplayLedger([other])).items) == 1


def test_ledger_entries_keep_the_wait_id_and_read_older_entries_without_one() -> None:
    entry = LedgerEntry(DlqCoordinates(0, 1), 5, "orders", 2, 3, 4, uuid.uuid4())
    assert parse_ledger_record(ledger_record(entry).value) == entry
    older = json.loads(ledger_record(entry).value or b"")
    del older["wait_id"]
    assert parse_ledger_record(json.dumps(older).encode()).wait_id is None


@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 10**6)),
             min_size=1, max_size=30),
    st.sets(st.integers(0, 4)),
)
def test_each_wait_id_goes_once_and_none_replayed_before(
    copies: list[tuple[int, int, int]], replayed_before: set[int]
) -> None:
    """DLQ records of a few originals over three partitions, some wait ids replayed before: the
    plan holds each wait id not replayed exactly once, the oldest of its records."""
    offsets = [0, 0, 0]
    records = []
    for source_offset, partition, timestamp_ms in copies:
        records.append(dlq_record(original(source_offset), partition, offsets[partition],
                                  timestamp_ms))
        offsets[partition] += 1
    ids = {n: wire.wait_id_for(GROUP, "orders", 0, n) for n in range(5)}
    ledger = ReplayLedger([LedgerEntry(DlqCoordinates(9, n), 0, "orders", 0, n, 1, ids[n])
                           for n in replayed_before])
    plan = plan_of(records, ledger=ledger)
    expected = {ids[n] for n, _, _ in copies} - {ids[n] for n in replayed_before}
    assert sorted(map(str, (item.wait_id for item in plan.items))) == sorted(map(str, expected))
    for item in plan.items:
        oldest = min(r.sort_key() for r in records if wait_id(r) == item.wait_id)
        assert (item.timestamp_ms, item.coordinates.partition,
                item.coordinates.offset) == oldest
    assert len(plan.items) + plan.duplicate_wait_id + plan.already_replayed == len(records)


def test_a_reference_dlq_record_is_never_replayed() -> None:
    """A DLQ record that only references an original too large to copy carries no key, value or
    headers: replaying it would write an empty record in the original's place."""
    source = original(3)
    out = wire.dlq_reference_record(source, GROUP, Failure("RecordTooLargeError", "too big"))
    reference = DlqRecord.parse(DlqCoordinates(0, 0), 1_000, out.key, out.value, out.headers)
    planner = ReplayPlanner(ReplayRequest(force=True), ReplayLedger(), 50)
    assert planner.consider(reference) is Verdict.REFERENCE_ONLY
    assert planner.plan().items == ()
    assert planner.plan().reference_only == 1
