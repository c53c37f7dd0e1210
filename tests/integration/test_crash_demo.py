"""`make demo`'s crash act on the real stack: kill -9 of a pod mid-load, a restart, the Spark
reconciliation job; every record accounted for, none lost, repeats within the bound. (Its
bound once allowed the window only and the demo failed on a healthy pod.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.faults.crash_demo import RECORDS, run_crash_demo
from loadtest.harness.accounting import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(600)
async def test_the_demo_crash_loses_nothing_and_repeats_within_its_bound(
    kafka_bootstrap: str, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAITLINE_PG_DSN", pg_dsn)  # the demo's `waitline reconcile --once`
    report = await run_crash_demo(kafka_bootstrap, tmp_path, lambda _line: None)
    account = report.account
    shown = "\n".join(report.lines())
    assert report.ok, shown
    assert report.records == RECORDS, shown
    assert account.count(Outcome.LOST) == 0 and account.count(Outcome.OPEN) == 0, shown
    assert 0 < account.in_flight_at_kill <= account.most_open, shown  # killed mid-load
    assert account.extra_calls <= account.bound, shown
    assert account.unknown_keys == 0, shown
