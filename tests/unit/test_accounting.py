"""Every record accounted for (the crash demo's and the fault suite's one account): one outcome
per record, repeats explained by the kills, and what a run allows."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadtest.harness.accounting import (
    Allowed,
    AtTheKill,
    Coordinates,
    Observed,
    Outcome,
    account,
    classify,
    prepared_since_commit,
)

pytestmark = pytest.mark.unit

EXPIRED = "ExpiredRecordException"
TIMEOUT = "TimeoutError"


def wait_id(partition: int, offset: int) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_OID, f"g/orders/{partition}/{offset}")


@pytest.mark.parametrize(
    ("calls", "in_dlq", "open_", "expected"),
    [
        (0, False, False, Outcome.LOST),
        (1, False, False, Outcome.CALLED_ONCE),
        (2, False, False, Outcome.CALLED_MORE_THAN_ONCE),
        (5, False, False, Outcome.CALLED_MORE_THAN_ONCE),
        (0, False, True, Outcome.OPEN),
        (1, False, True, Outcome.OPEN),
        (0, True, False, Outcome.IN_DLQ),
        (2, True, True, Outcome.IN_DLQ),
    ],
)
def test_classify_puts_the_dlq_first_then_open_then_calls(
    calls: int, in_dlq: bool, open_: bool, expected: Outcome
) -> None:
    assert classify(calls, in_dlq, open_) is expected


def test_prepared_since_commit_is_at_or_above_the_committed_offset() -> None:
    inputs = {wait_id(p, o): Coordinates(p, o) for p in (0, 1) for o in range(4)}
    at_kill = AtTheKill(committed={0: 2}, prepared=frozenset(inputs) | {uuid.uuid4()},
                        closed=frozenset())  # fmt: skip
    assert prepared_since_commit(inputs, at_kill) == {
        wait_id(0, 2), wait_id(0, 3), *(wait_id(1, o) for o in range(4))  # 1: nothing committed
    }


def _observed(**changes: object) -> Observed:
    inputs = {wait_id(0, o): Coordinates(0, o) for o in range(6)}
    base = Observed(
        inputs=inputs, window=2, most_open=2,
        kills=(AtTheKill(committed={0: 3}, prepared=frozenset(wait_id(0, o) for o in range(5)),
                         closed=frozenset(wait_id(0, o) for o in (0, 2, 3))),),
        calls={str(wait_id(0, o)): n for o, n in [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2), (5, 1)]},
        dlq={wait_id(0, 1): [EXPIRED]}, open_at_end=frozenset({wait_id(0, 1)}),
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_crash_within_the_design_is_accounted_exactly() -> None:
    result = account(_observed())
    assert result.violations == ()
    assert [result.outcomes[wait_id(0, o)] for o in range(6)] == [
        Outcome.CALLED_ONCE, Outcome.IN_DLQ, Outcome.CALLED_ONCE,
        Outcome.CALLED_MORE_THAN_ONCE, Outcome.CALLED_MORE_THAN_ONCE, Outcome.CALLED_ONCE,
    ]  # fmt: skip
    assert result.dlq_by_exception == {EXPIRED: 1}
    assert result.repeated == {wait_id(0, 3), wait_id(0, 4)}
    assert result.extra_calls == 2
    assert result.in_flight_at_kill == 2  # offsets 1 and 4
    assert result.prepared_since_commit == {wait_id(0, 3), wait_id(0, 4)}
    assert result.bound == 2 + 2


def test_each_broken_promise_is_named() -> None:
    calls = dict(_observed().calls)
    calls[str(wait_id(0, 0))] = 2  # below the commit: the restarted pod never fetched it
    calls["not-an-input"] = 1
    del calls[str(wait_id(0, 5))]  # never called, not in the DLQ, not open
    result = account(_observed(calls=calls, window=1, most_open=1))
    assert result.count(Outcome.LOST) == 1
    assert result.violations == (
        "1 records lost: not called, not in the DLQ, not open",
        f"1 records called more than once were not prepared since the last commit at any kill "
        f"(e.g. {wait_id(0, 0)})",
        "2 records in flight at a kill exceed the 1 a pod with window 1 may hold open",
        "1 calls carried an Idempotency-Key of no input record",
    )


def test_more_repeated_calls_than_the_bound_is_a_violation() -> None:
    calls = {**_observed().calls, str(wait_id(0, 3)): 9}
    result = account(_observed(calls=calls))
    assert result.extra_calls == 8 + 1
    assert f"9 repeated calls exceed the bound {result.bound}" in result.violations


# --- a crash as the design allows it, simulated, is always accounted without violation -------

@dataclass(frozen=True)
class Partition:
    records: int
    prepared: int  # the first pod prepared offsets [0, prepared)
    committed: int  # <= prepared: only what is prepared is committed
    unfinished: frozenset[int]  # prepared offsets the first pod had not tombstoned at the kill
    failed: frozenset[int]  # offsets whose final call went to the DLQ (timed out)


@st.composite
def partitions(draw: st.DrawFn) -> Partition:
    records = draw(st.integers(0, 30))
    prepared = draw(st.integers(0, records))
    committed = draw(st.integers(0, prepared))
    offsets = st.sets(st.integers(0, max(prepared - 1, 0)), max_size=prepared)
    return Partition(records, prepared, committed, frozenset(draw(offsets)) if prepared else
                     frozenset(), frozenset(draw(st.sets(st.integers(0, max(records - 1, 0))))))


def simulate(layout: list[Partition]) -> Observed:
    """Pod 1 prepared and called [0, prepared), finished all but `unfinished`, committed
    `committed`; pod 2 fetched from `committed` and finished everything; the reconciliation
    job expired what stayed open (unfinished below the commit) to the DLQ."""
    inputs: dict[uuid.UUID, Coordinates] = {}
    calls: dict[str, int] = {}
    dlq: dict[uuid.UUID, list[str]] = {}
    prepared, closed, open_at_end = set(), set(), set()
    for p, part in enumerate(layout):
        for offset in range(part.records):
            wid = wait_id(p, offset)
            inputs[wid] = Coordinates(p, offset)
            first_pod = offset < part.prepared
            second_pod = offset >= part.committed
            calls[str(wid)] = int(first_pod) + int(second_pod)
            if first_pod:
                prepared.add(wid)
                if offset not in part.unfinished:
                    closed.add(wid)
            if first_pod and offset in part.unfinished and not second_pod:
                open_at_end.add(wid)
                dlq.setdefault(wid, []).append(EXPIRED)
            elif offset in part.failed:
                dlq.setdefault(wid, []).append(TIMEOUT)
    in_flight = len(prepared - closed)
    return Observed(inputs=inputs, window=in_flight, most_open=in_flight,
                    kills=(AtTheKill(committed={p: part.committed for p, part in
                                                enumerate(layout)},
                                     prepared=frozenset(prepared), closed=frozenset(closed)),),
                    calls=calls, dlq=dlq, open_at_end=frozenset(open_at_end))  # fmt: skip


@given(st.lists(partitions(), max_size=4))
def test_every_record_has_one_outcome_and_a_design_crash_breaks_no_promise(
    layout: list[Partition],
) -> None:
    observed = simulate(layout)
    result = account(observed)
    assert result.violations == ()
    assert set(result.outcomes) == set(observed.inputs)
    assert sum(result.count(o) for o in Outcome) == len(observed.inputs)
    assert result.count(Outcome.LOST) == 0
    assert result.extra_calls == sum(max(0, n - 1) for n in observed.calls.values())
    assert result.bound is not None
    assert result.extra_calls <= result.bound
    assert sum(result.dlq_by_exception.values()) == sum(len(e) for e in observed.dlq.values())


@given(st.lists(partitions(), min_size=1, max_size=4), st.data())
def test_a_record_that_vanishes_is_reported_lost(
    layout: list[Partition], data: st.DataObject
) -> None:
    observed = simulate(layout)
    if not observed.inputs:
        return
    gone = data.draw(st.sampled_from(sorted(observed.inputs)))
    vanished = replace(
        observed,
        calls={k: n for k, n in observed.calls.items() if k != str(gone)},
        dlq={k: e for k, e in observed.dlq.items() if k != gone},
        open_at_end=observed.open_at_end - {gone},
    )
    result = account(vanished)
    assert result.outcomes[gone] is Outcome.LOST
    assert result.violations[0] == "1 records lost: not called, not in the DLQ, not open"


@given(st.lists(partitions(), min_size=1, max_size=4), st.data())
def test_a_repeat_below_the_commit_is_caught_per_record(
    layout: list[Partition], data: st.DataObject
) -> None:
    observed = simulate(layout)
    below = sorted(w for w, c in observed.inputs.items()
                   if c.offset < observed.kills[0].committed[c.partition])  # fmt: skip
    if not below:
        return
    extra = data.draw(st.sampled_from(below))
    result = account(replace(observed, calls={**observed.calls, str(extra): 2}))
    assert any("not prepared since the last commit" in v for v in result.violations)


def test_records_prepared_ahead_or_tombstoning_behind_the_window_are_within_the_design() -> None:
    # The pod holds more than the window prepared and not tombstoned: records prepared ahead of
    # a call slot and tombstones written behind it (DESIGN.md "The window").
    within = account(_observed(window=1, most_open=2))
    assert within.in_flight_at_kill == 2
    assert within.violations == ()


# --- what a run allows besides "nothing lost" (the fault suite's scenarios) -----------------

RECORDS = 40
INPUTS = {wait_id(0, offset): Coordinates(0, offset) for offset in range(RECORDS)}


def kill_at(committed: int, prepared_up_to: int) -> AtTheKill:
    prepared = frozenset(wait_id(0, o) for o in range(prepared_up_to))
    return AtTheKill(committed={0: committed}, prepared=prepared,
                     closed=frozenset(wait_id(0, o) for o in range(committed)))


def observe(calls: dict[int, int], *, kills: tuple[AtTheKill, ...] = (),
            dlq: dict[int, list[str]] | None = None, open_: frozenset[int] = frozenset(),
            window: int = 5) -> Observed:
    return Observed(
        inputs=INPUTS, window=window, kills=kills,
        calls={str(wait_id(0, o)): n for o, n in calls.items()},
        dlq={wait_id(0, o): reasons for o, reasons in (dlq or {}).items()},
        open_at_end=frozenset(wait_id(0, o) for o in open_))


def test_a_clean_run_has_every_record_called_once() -> None:
    result = account(observe(dict.fromkeys(range(RECORDS), 1)), Allowed(extra_calls=0))
    assert result.ok
    assert result.count(Outcome.CALLED_ONCE) == RECORDS
    assert result.bound is None


def test_dlq_and_open_records_are_accounted_and_open_ones_can_be_refused() -> None:
    calls = dict.fromkeys(range(2, RECORDS), 1)
    observed = observe(calls, dlq={0: ["TimeoutError"]}, open_=frozenset({1}))
    assert account(observed, Allowed()).ok
    refused = account(observed, Allowed(open_at_end=False))
    assert refused.violations == ("1 records left open in the wait topic",)
    assert refused.dlq_by_exception == {"TimeoutError": 1}


def test_more_records_in_the_dlq_than_allowed_is_a_violation() -> None:
    calls = dict.fromkeys(range(RECORDS), 1)
    observed = observe(calls, dlq={0: ["TimeoutError"], 1: ["TimeoutError"]})
    assert account(observed, Allowed(dead_lettered=2)).ok
    assert account(observed, Allowed(dead_lettered=1)).violations == (
        "2 records in the DLQ (allowed: 1)",)


def test_a_dlq_record_without_a_reason_is_a_violation() -> None:
    calls = dict.fromkeys(range(1, RECORDS), 1)
    result = account(observe(calls, dlq={0: [""]}), Allowed())
    assert result.violations == ("1 DLQ records name no reason",)


def test_repeats_without_a_kill_break_a_zero_allowance() -> None:
    calls = dict.fromkeys(range(RECORDS), 1) | {3: 2}
    assert account(observe(calls), Allowed(extra_calls=0)).violations == (
        "1 repeated calls (allowed: 0)",)


def test_each_kill_adds_its_window_and_its_records_prepared_since_the_commit_to_the_bound(
) -> None:
    calls = dict.fromkeys(range(RECORDS), 1)
    result = account(observe(calls, kills=(kill_at(10, 15), kill_at(20, 22))), Allowed())
    assert result.bound == (5 + 5) + (5 + 2)
    assert result.in_flight_at_kill == 5


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
    result = account(observe(calls, kills=tuple(snapshots), window=10), Allowed())
    assert result.ok, result.violations
    assert result.extra_calls <= (result.bound or 0)
