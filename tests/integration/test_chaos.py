"""The fault suite's short version (`waitline loadtest chaos --scale short`), one test per
scenario, on the test stack: every record accounted for from outside the pods, none lost, and
each scenario's own rule (docs/RELIABILITY.md) held."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.stack import LocalStack
from loadtest.faults.chaos import SCENARIOS, run_chaos
from loadtest.harness.accounting import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_the_short_fault_suite_loses_nothing(
    scenario: str, kafka_bootstrap: str, local_stack: LocalStack, tmp_path: Path
) -> None:
    [result] = await run_chaos(kafka_bootstrap, tmp_path, "short", [scenario], print,
                               stack=local_stack)
    assert result.account.count(Outcome.LOST) == 0
    assert result.ok, result.row()
    assert result.records > 0
