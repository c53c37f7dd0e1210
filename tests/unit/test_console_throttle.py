"""The login throttle's policy (pure): failures within a window lock a key out, each further
failure doubles the lock up to a bound, and a run of failures is forgotten after the window;
unknown names and addresses fall into a bounded number of keys."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.console.throttle import (
    ADDRESS_BUCKETS,
    UNKNOWN_NAME_BUCKETS,
    Failures,
    ThrottlePolicy,
    address_key,
    name_key,
)

pytestmark = pytest.mark.unit

POLICY = ThrottlePolicy(max_failures=2, window_s=60, lockout_s=10, max_lockout_s=25)


def test_failures_within_the_window_lock_out_doubling_up_to_the_bound() -> None:
    state = POLICY.after_failure(None, 0)
    assert state == Failures(1, 0, 0.0)
    state = POLICY.after_failure(POLICY.after_failure(None, 0), 61)  # outside the window
    assert state.count == 1 and state.locked_until == 0
    state = POLICY.after_failure(state, 62)
    assert state.locked_until == 72  # the second failure locks for 10 s
    state = POLICY.after_failure(state, 72)
    assert state.locked_until == 92  # then 20 s
    state = POLICY.after_failure(state, 92)
    assert state.locked_until == 117  # then capped at 25 s
    assert POLICY.after_failure(state, 117 + 61).count == 1  # the window after the lock


@given(st.lists(st.floats(min_value=0, max_value=10_000, allow_nan=False), max_size=200))
def test_a_lock_never_lasts_longer_than_the_bound(gaps: list[float]) -> None:
    state: Failures | None = None
    now = 0.0
    for gap in gaps:
        now += gap
        state = POLICY.after_failure(state, now)
        assert state.locked_until - now <= POLICY.max_lockout_s


def test_unknown_names_and_addresses_share_a_bounded_set_of_keys() -> None:
    known = {"alice"}
    assert name_key("alice", known) == "name:alice"
    unknown = {name_key(f"made-up-{i}", known) for i in range(20_000)}
    assert len(unknown) <= UNKNOWN_NAME_BUCKETS and "name:made-up-1" not in unknown
    assert len({address_key(f"10.0.{i // 256}.{i % 256}") for i in range(20_000)}) <= (
        ADDRESS_BUCKETS)
    assert name_key("mallory", known) == name_key("mallory", known)  # every replica agrees
