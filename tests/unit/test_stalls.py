"""The stuck-record bookkeeping: stall length, oldest pending record, one warning per stall."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.pod.stalls import Pending, StallTracker

pytestmark = pytest.mark.unit

TP = ("orders", 3)


def test_a_partition_that_is_caught_up_has_no_stall() -> None:
    stall = StallTracker(60).observe(TP, None, behind=False, now=100.0)
    assert (stall.stall_s, stall.oldest_offset, stall.oldest_age_s, stall.warn) == (
        0.0, None, 0.0, False)


def test_the_stall_grows_from_when_the_partition_fell_behind_and_warns_once() -> None:
    tracker = StallTracker(60)
    oldest = Pending(offset=42, since=90.0, reason="waiting for its wait record")
    assert tracker.observe(TP, oldest, behind=True, now=100.0).stall_s == 0.0
    assert not tracker.observe(TP, oldest, behind=True, now=159.0).warn
    first = tracker.observe(TP, oldest, behind=True, now=160.0)
    assert (first.stall_s, first.oldest_offset, first.oldest_age_s, first.warn) == (
        60.0, 42, 70.0, True)
    assert "orders/3 has not committed for 60 s" in first.describe()
    assert "offset 42" in first.describe()
    assert not tracker.observe(TP, oldest, behind=True, now=300.0).warn  # once per stall


def test_a_commit_ends_the_stall_and_rearms_the_warning() -> None:
    tracker = StallTracker(10)
    oldest = Pending(7, 0.0, "x")
    tracker.observe(TP, oldest, behind=True, now=0.0)
    assert tracker.observe(TP, oldest, behind=True, now=20.0).warn
    tracker.committed(TP, now=21.0)
    assert tracker.observe(TP, oldest, behind=True, now=25.0).stall_s == 4.0
    assert tracker.observe(TP, oldest, behind=True, now=31.0).warn


@given(st.lists(st.tuples(st.floats(0, 50), st.booleans(), st.booleans()), max_size=40))
def test_the_stall_never_exceeds_the_time_since_the_partition_was_last_caught_up(
    steps: list[tuple[float, bool, bool]]
) -> None:
    tracker = StallTracker(30)
    now, caught_up_at, warned = 0.0, 0.0, False
    for advance, behind, commits in steps:
        now += advance
        if commits:
            tracker.committed(TP, now)
            caught_up_at, warned = now, False
        stall = tracker.observe(TP, None, behind=behind, now=now)
        if not behind:
            caught_up_at, warned = now, False
        assert 0.0 <= stall.stall_s <= now - caught_up_at + 1e-9
        assert not (stall.warn and warned)  # never twice in one stall
        warned = warned or stall.warn
        assert stall.warn == (stall.warn and stall.stall_s >= 30)
