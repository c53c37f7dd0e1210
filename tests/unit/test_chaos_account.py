"""The fault suite's account: every record one outcome, repeats explained by the kills."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadtest.chaos_account import Allowed, FaultObservation, account_faults
from loadtest.crash_account import AtTheKill, Coordinates, Outcome

pytestmark = pytest.mark.unit

RECORDS = 40


def wait_id(offset: int) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_OID, f"g/orders/0/{offset}")


INPUTS = {wait_id(offset): Coordinates(0, offset) for offset in range(RECORDS)}


def kill_at(committed: int, prepared_up_to: int) -> AtTheKill:
    prepared = frozenset(wait_id(o) for o in range(prepared_up_to))
    return AtTheKill(committed={0: committed}, prepared=prepared,
                     closed=frozenset(wait_id(o) for o in range(committed)))


def observe(calls: dict[int, int], *, kills: tuple[AtTheKill, ...] = (),
            dlq: dict[int, list[str]] | None = None, open_: frozenset[int] = frozenset(),
            window: int = 5) -> FaultObservation:
    return FaultObservation(
        inputs=INPUTS, window=window, kills=kills,
        calls={str(wait_id(o)): n for o, n in calls.items()},
        dlq={wait_id(o): reasons for o, reasons in (dlq or {}).items()},
        open_at_end=frozenset(wait_id(o) for o in open_))


def test_a_clean_run_has_every_record_called_once() -> None:
    result = account_faults(observe(dict.fromkeys(range(RECORDS), 1)), Allowed(extra_calls=0))
    assert result.ok
    assert result.outcomes[Outcome.CALLED_ONCE] == RECORDS
    assert result.bound is None


def test_a_record_nobody_has_is_lost() -> None:
    calls = dict.fromkeys(range(1, RECORDS), 1)
    result = account_faults(observe(calls), Allowed())
    assert result.outcomes[Outcome.LOST] == 1
    assert result.violations == ("1 records lost: not called, not in the DLQ, not open",)


def test_dlq_and_open_records_are_accounted_and_open_ones_can_be_refused() -> None:
    calls = dict.fromkeys(range(2, RECORDS), 1)
    observed = observe(calls, dlq={0: ["TimeoutError"]}, open_=frozenset({1}))
    assert account_faults(observed, Allowed()).ok
    refused = account_faults(observed, Allowed(open_at_end=False))
    assert refused.violations == ("1 records left open in the wait topic",)
    assert refused.dlq_by_exception == {"TimeoutError": 1}


def test_more_records_in_the_dlq_than_allowed_is_a_violation() -> None:
    calls = dict.fromkeys(range(RECORDS), 1)
    observed = observe(calls, dlq={0: ["TimeoutError"], 1: ["TimeoutError"]})
    assert account_faults(observed, Allowed(dead_lettered=2)).ok
    assert account_faults(observed, Allowed(dead_lettered=1)).violations == (
        "2 records in the DLQ (allowed: 1)",)


def test_a_dlq_record_without_a_reason_is_a_violation() -> None:
    calls = dict.fromkeys(range(1, RECORDS), 1)
    result = account_faults(observe(calls, dlq={0: [""]}), Allowed())
    assert result.violations == ("1 DLQ records name no reason",)


def test_repeats_without_a_kill_break_a_zero_allowance() -> None:
    calls = dict.fromkeys(range(RECORDS), 1) | {3: 2}
    assert account_faults(observe(calls), Allowed(extra_calls=0)).violations == (
        "1 repeated calls (allowed: 0)",)


def test_a_repeat_below_every_kill_commit_is_unexplained() -> None:
    calls = dict.fromkeys(range(RECORDS), 1) | {2: 2}  # offset 2 was committed at the kill
    result = account_faults(observe(calls, kills=(kill_at(10, 15),)), Allowed())
    assert result.bound == 5 + 5
    assert result.violations == ("1 records called more than once were not prepared since the "
                                 "last commit at any kill",)


def test_calls_with_unknown_keys_are_reported() -> None:
    observed = observe(dict.fromkeys(range(RECORDS), 1))
    stray = FaultObservation(**{**observed.__dict__,
                                "calls": {**observed.calls, "not-a-wait-id": 2}})
    assert account_faults(stray, Allowed()).violations == (
        "2 calls carried an Idempotency-Key of no input record",)


@given(st.lists(st.tuples(st.integers(0, RECORDS - 1), st.integers(0, 10)), min_size=1,
                max_size=6))
def test_design_conforming_kills_never_break_the_bound(kills: list[tuple[int, int]]) -> None:
    """Each kill: committed at c, prepared up to c + p; the restart calls c.. again at most once
    more. Whatever the kills, the account finds nothing wrong."""
    snapshots = []
    calls = dict.fromkeys(range(RECORDS), 1)
    for committed, ahead in sorted(kills):
        prepared_up_to = min(RECORDS, committed + ahead)
        snapshots.append(kill_at(committed, prepared_up_to))
        for offset in range(committed, prepared_up_to):
            calls[offset] += 1
    result = account_faults(observe(calls, kills=tuple(snapshots), window=10), Allowed())
    assert result.ok, result.violations
    assert result.extra_calls <= (result.bound or 0)
