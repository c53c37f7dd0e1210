"""The offset watermark: a partition commits only offsets below which every record is prepared."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from dispatcher.pod.watermark import OffsetWatermark, PartitionWatermarks, TopicPartitionKey

pytestmark = pytest.mark.unit


def reference_committable(tracked: list[int], prepared: set[int]) -> int | None:
    """Trivially correct: the lowest unprepared tracked offset, else one past the highest."""
    unprepared = [offset for offset in tracked if offset not in prepared]
    if unprepared:
        return min(unprepared)
    return max(tracked) + 1 if tracked else None


# --- OffsetWatermark ----------------------------------------------------------------------------


def test_nothing_is_committable_before_anything_is_tracked() -> None:
    watermark = OffsetWatermark()
    assert watermark.committable() is None
    assert watermark.pending == 0


def test_a_tracked_unprepared_record_holds_the_commit_at_its_offset() -> None:
    watermark = OffsetWatermark()
    watermark.track(5)
    assert watermark.committable() == 5
    assert watermark.pending == 1
    watermark.mark_prepared(5)
    assert watermark.committable() == 6
    assert watermark.pending == 0


def test_out_of_order_prepares_do_not_move_the_commit_past_an_unprepared_record() -> None:
    watermark = OffsetWatermark()
    for offset in (10, 11, 12, 13):
        watermark.track(offset)
    watermark.mark_prepared(13)
    watermark.mark_prepared(11)
    assert watermark.committable() == 10
    watermark.mark_prepared(10)
    assert watermark.committable() == 12
    watermark.mark_prepared(12)
    assert watermark.committable() == 14


def test_gaps_in_tracked_offsets_are_skipped() -> None:
    """Compaction and transaction markers leave gaps; the commit jumps over them."""
    watermark = OffsetWatermark()
    for offset in (3, 7, 20):
        watermark.track(offset)
    watermark.mark_prepared(3)
    assert watermark.committable() == 7
    watermark.mark_prepared(7)
    watermark.mark_prepared(20)
    assert watermark.committable() == 21


@pytest.mark.parametrize(("first", "second"), [(5, 5), (5, 4)])
def test_tracking_a_non_increasing_offset_is_refused(first: int, second: int) -> None:
    watermark = OffsetWatermark()
    watermark.track(first)
    with pytest.raises(ValueError, match="strictly increase"):
        watermark.track(second)


def test_tracking_a_negative_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        OffsetWatermark().track(-1)


@pytest.mark.parametrize("offset", [6, 100, -1])
def test_preparing_an_offset_never_tracked_is_refused(offset: int) -> None:
    watermark = OffsetWatermark()
    watermark.track(5)
    with pytest.raises(ValueError, match="never tracked"):
        watermark.mark_prepared(offset)


def test_preparing_on_an_empty_watermark_is_refused() -> None:
    with pytest.raises(ValueError, match="never tracked"):
        OffsetWatermark().mark_prepared(0)


def test_preparing_twice_changes_nothing() -> None:
    watermark = OffsetWatermark()
    watermark.track(1)
    watermark.track(2)
    watermark.mark_prepared(2)
    watermark.mark_prepared(2)
    assert watermark.committable() == 1
    assert watermark.pending == 1


@pytest.mark.parametrize("count", range(1, 6))
def test_every_prepare_order_matches_the_reference(count: int) -> None:
    """Exhaustive: every permutation of prepares over small offset sets with and without gaps."""
    for tracked in ([*range(count)], [offset * 3 + 1 for offset in range(count)]):
        for order in itertools.permutations(tracked):
            watermark = OffsetWatermark()
            for offset in tracked:
                watermark.track(offset)
            prepared: set[int] = set()
            for offset in order:
                watermark.mark_prepared(offset)
                prepared.add(offset)
                assert watermark.committable() == reference_committable(tracked, prepared)
                assert watermark.pending == len(tracked) - len(prepared)
                assert watermark.highest_prepared == max(prepared)


def test_memory_is_bounded_by_unprepared_records_while_one_prepare_is_stuck() -> None:
    watermark = OffsetWatermark()
    watermark.track(0)  # its prepare never completes
    for offset in range(1, 100_001):
        watermark.track(offset)
        watermark.mark_prepared(offset)
    assert watermark.committable() == 0
    assert watermark.pending == 1
    # The private queue is the only structure that could grow with prepared records.
    assert len(watermark._in_order) <= 2 * watermark.pending + 32


@given(st.permutations(range(0, 240, 2)))
def test_long_prepare_orders_match_the_reference(order: list[int]) -> None:
    """Long runs: prepares far behind a stuck one exercise the queue's compaction."""
    tracked = sorted(order)
    watermark = OffsetWatermark()
    for offset in tracked:
        watermark.track(offset)
    prepared: set[int] = set()
    for offset in order:
        watermark.mark_prepared(offset)
        prepared.add(offset)
        assert watermark.committable() == reference_committable(tracked, prepared)


@given(st.data())
def test_interleaved_track_and_prepare_match_the_reference(data: st.DataObject) -> None:
    watermark = OffsetWatermark()
    tracked: list[int] = []
    prepared: set[int] = set()
    next_offset = 0
    for _ in range(data.draw(st.integers(0, 60))):
        unprepared = [offset for offset in tracked if offset not in prepared]
        prepare_one = bool(unprepared) and data.draw(st.booleans())
        if prepare_one:
            offset = data.draw(st.sampled_from(unprepared))
            watermark.mark_prepared(offset)
            prepared.add(offset)
        else:
            next_offset += data.draw(st.integers(0, 3))  # a gap of 0..3 offsets
            watermark.track(next_offset)
            tracked.append(next_offset)
            next_offset += 1
        assert watermark.committable() == reference_committable(tracked, prepared)
        assert watermark.pending == len(tracked) - len(prepared)
        assert watermark.highest_prepared == max(prepared, default=None)


def test_the_highest_prepared_offset_ignores_repeats_and_is_kept_per_partition() -> None:
    """What a revoke needs: the unprepared offsets below it are holes (dispatcher/pod/revoke.py)."""
    watermarks = PartitionWatermarks()
    assert watermarks.highest_prepared(("orders", 0)) is None
    for offset in range(4):
        watermarks.track(("orders", 0), offset)
    watermarks.track(("orders", 1), 9)
    watermarks.mark_prepared(("orders", 0), 2)
    watermarks.mark_prepared(("orders", 0), 1)
    watermarks.mark_prepared(("orders", 0), 2)
    assert watermarks.highest_prepared(("orders", 0)) == 2
    assert watermarks.highest_prepared(("orders", 1)) is None
    watermarks.forget(("orders", 0))
    assert watermarks.highest_prepared(("orders", 0)) is None


# --- PartitionWatermarks ------------------------------------------------------------------------

ORDERS_0: TopicPartitionKey = ("orders", 0)
ORDERS_1: TopicPartitionKey = ("orders", 1)


def test_commits_are_due_only_when_the_committable_offset_moved() -> None:
    watermarks = PartitionWatermarks()
    watermarks.track(ORDERS_0, 0)
    watermarks.track(ORDERS_0, 1)
    watermarks.track(ORDERS_1, 7)
    assert watermarks.commits_due() == {ORDERS_0: 0, ORDERS_1: 7}
    watermarks.mark_committed(ORDERS_0, 0)
    watermarks.mark_committed(ORDERS_1, 7)
    assert watermarks.commits_due() == {}
    watermarks.mark_prepared(ORDERS_0, 1)
    assert watermarks.commits_due() == {}
    watermarks.mark_prepared(ORDERS_0, 0)
    assert watermarks.commits_due() == {ORDERS_0: 2}


def test_the_committed_offset_given_at_assignment_is_not_committed_again() -> None:
    watermarks = PartitionWatermarks()
    watermarks.mark_committed(ORDERS_0, 40)
    watermarks.track(ORDERS_0, 40)
    assert watermarks.commits_due() == {}
    watermarks.mark_prepared(ORDERS_0, 40)
    assert watermarks.commits_due() == {ORDERS_0: 41}


def test_a_commit_completing_late_does_not_move_the_committed_offset_back() -> None:
    watermarks = PartitionWatermarks()
    for offset in range(3):
        watermarks.track(ORDERS_0, offset)
        watermarks.mark_prepared(ORDERS_0, offset)
    watermarks.mark_committed(ORDERS_0, 3)
    watermarks.mark_committed(ORDERS_0, 1)
    assert watermarks.commits_due() == {}


def test_a_forgotten_partition_has_no_commits_due_and_starts_afresh() -> None:
    watermarks = PartitionWatermarks()
    watermarks.track(ORDERS_0, 10)
    watermarks.mark_committed(ORDERS_0, 10)
    watermarks.forget(ORDERS_0)
    assert watermarks.commits_due() == {}
    assert watermarks.pending(ORDERS_0) == 0
    with pytest.raises(ValueError, match="no tracked offsets"):
        watermarks.mark_prepared(ORDERS_0, 10)
    watermarks.track(ORDERS_0, 3)  # re-assigned, e.g. after an offset reset: lower is fine
    assert watermarks.commits_due() == {ORDERS_0: 3}


def test_pending_counts_unprepared_records_per_partition() -> None:
    watermarks = PartitionWatermarks()
    watermarks.track(ORDERS_0, 0)
    watermarks.track(ORDERS_0, 1)
    watermarks.track(ORDERS_1, 0)
    watermarks.mark_prepared(ORDERS_0, 1)
    assert watermarks.pending(ORDERS_0) == 1
    assert watermarks.pending(ORDERS_1) == 1
    assert watermarks.pending(("payments", 0)) == 0


class CommitOnlyWhatIsPrepared(RuleBasedStateMachine):
    """Random interleavings of fetch, prepare and commit over two partitions."""

    fetched = Bundle("fetched")

    @initialize()
    def start(self) -> None:
        self.watermarks = PartitionWatermarks()
        self.next_offset: dict[TopicPartitionKey, int] = {ORDERS_0: 0, ORDERS_1: 100}
        self.tracked: dict[TopicPartitionKey, list[int]] = {ORDERS_0: [], ORDERS_1: []}
        self.prepared: dict[TopicPartitionKey, set[int]] = {ORDERS_0: set(), ORDERS_1: set()}
        self.committed: dict[TopicPartitionKey, int] = {}

    @rule(target=fetched, tp=st.sampled_from([ORDERS_0, ORDERS_1]), gap=st.integers(0, 2))
    def fetch(self, tp: TopicPartitionKey, gap: int) -> tuple[TopicPartitionKey, int]:
        offset = self.next_offset[tp] + gap
        self.next_offset[tp] = offset + 1
        self.watermarks.track(tp, offset)
        self.tracked[tp].append(offset)
        return tp, offset

    @rule(record=consumes(fetched))
    def prepare(self, record: tuple[TopicPartitionKey, int]) -> None:
        tp, offset = record
        self.watermarks.mark_prepared(tp, offset)
        self.prepared[tp].add(offset)

    @rule()
    def commit(self) -> None:
        for tp, offset in self.watermarks.commits_due().items():
            assert offset > self.committed.get(tp, -1), "commits must be monotonic"
            unprepared = [o for o in self.tracked[tp] if o not in self.prepared[tp]]
            assert all(offset <= o for o in unprepared), "commit passed an unprepared record"
            assert offset == reference_committable(self.tracked[tp], self.prepared[tp])
            self.watermarks.mark_committed(tp, offset)
            self.committed[tp] = offset

    @precondition(lambda self: any(self.tracked.values()))
    @rule()
    def prepare_all_and_commit(self) -> None:
        """Once every fetched record is prepared, the commit reaches one past the last fetched."""
        for tp, tracked in self.tracked.items():
            for offset in tracked:
                self.watermarks.mark_prepared(tp, offset)  # repeats are no-ops
            self.prepared[tp].update(tracked)
        self.commit()
        for tp, tracked in self.tracked.items():
            if tracked:
                assert self.committed[tp] == tracked[-1] + 1
        assert self.watermarks.commits_due() == {}

    @invariant()
    def pending_matches_the_model(self) -> None:
        for tp, tracked in self.tracked.items():
            expected = len([o for o in tracked if o not in self.prepared[tp]])
            assert self.watermarks.pending(tp) == expected


TestCommitOnlyWhatIsPrepared = CommitOnlyWhatIsPrepared.TestCase
TestCommitOnlyWhatIsPrepared.settings = settings(max_examples=150, stateful_step_count=40)
