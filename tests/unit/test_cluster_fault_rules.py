"""The commit-watermark rule the cluster fault scenarios check at each fault
(loadtest/faults/cluster_faults.py): a record below a committed offset must have been prepared
when the offsets were read."""

from __future__ import annotations

import uuid

import pytest

from loadtest.faults.cluster_faults import watermark_violations
from loadtest.harness.accounting import AtTheKill, Coordinates

pytestmark = pytest.mark.unit

IDS = [uuid.UUID(int=n) for n in range(6)]
INPUTS = {wait_id: Coordinates(partition=n % 2, offset=n // 2) for n, wait_id in enumerate(IDS)}


def _noted(committed: dict[int, int], prepared: set[int]) -> AtTheKill:
    return AtTheKill(committed=committed, prepared=frozenset(IDS[n] for n in prepared),
                     closed=frozenset())


def test_commits_behind_prepared_records_break_no_rule() -> None:
    # partition 0 holds ids 0, 2, 4 (offsets 0..2); partition 1 holds 1, 3, 5
    assert watermark_violations(INPUTS, [_noted({0: 2, 1: 1}, {0, 2, 1})]) == ()
    assert watermark_violations(INPUTS, [_noted({}, set())]) == ()  # nothing committed yet


def test_a_commit_past_an_unprepared_record_is_named_once_per_fault() -> None:
    noted = [_noted({0: 3}, {0, 4}), _noted({0: 1, 1: 1}, {0, 1})]
    [found] = watermark_violations(INPUTS, noted)
    assert found.startswith("1 records committed past before they were prepared")
    assert str(IDS[2]) in found
