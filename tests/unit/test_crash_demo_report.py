"""What the crash demo prints: every outcome, the bound it checks, and the verdict."""

from __future__ import annotations

import uuid

import pytest

from loadtest.faults.crash_demo import CrashReport
from loadtest.harness.accounting import AtTheKill, Coordinates, Observed, Outcome, account

pytestmark = pytest.mark.unit


def _report(second_calls: int) -> CrashReport:
    ids = [uuid.uuid4() for _ in range(4)]
    observed = Observed(
        inputs={w: Coordinates(0, o) for o, w in enumerate(ids)}, window=1, most_open=1,
        kills=(AtTheKill(committed={0: 2}, prepared=frozenset(ids[:3]),
                         closed=frozenset(ids[:2])),),
        calls={str(ids[0]): 1, str(ids[1]): 1, str(ids[2]): second_calls, str(ids[3]): 1},
        dlq={ids[1]: ["TimeoutError"]}, open_at_end=frozenset(),
    )  # fmt: skip
    return CrashReport(records=4, account=account(observed))


def test_the_report_names_each_outcome_the_bound_and_an_ok_verdict() -> None:
    report = _report(second_calls=2)
    lines = [" ".join(line.split()) for line in report.lines()]  # columns aside
    assert report.ok
    counts = {"called once": 2, "called more than once": 1, "in the DLQ": 1,
              "open in the wait topic": 0, "lost": 0}  # fmt: skip
    for outcome in Outcome:
        assert f"{outcome.value}: {counts[outcome.value]}" in lines
    assert ("bound on repeated calls: 2 = window 1 + 1 records prepared since the last commit"
            in lines)
    assert "DLQ records by exception: TimeoutError 1" in lines
    assert lines[-1] == "check: OK, no record lost, repeats within the bound"


def test_a_repeat_past_the_bound_fails_the_check_and_says_why() -> None:
    report = _report(second_calls=4)
    assert not report.ok
    assert report.lines()[-1] == "check FAILED: 3 repeated calls exceed the bound 2"
