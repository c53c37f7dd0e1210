"""The fault rig's clean-up (loadtest/faults/rig.py): a scenario that ends early, by its own
error or cancelled (as pytest-timeout ends one), leaves none of the rig's processes running.
No Kafka: the rig's bootstrap points at a port where nothing listens, so its pod and its commit
watch fail as they would against a dead cluster; the mock counterparty is real. Two `waitline`
processes started: 14-20 s on the shared machine (2026-11-27)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from dispatcher.ports import free_port
from loadtest.faults.rig import Rig
from loadtest.harness.processes import HarnessError

pytestmark = [pytest.mark.integration]

MODEL = "fixed:100"


def _children() -> set[int]:
    """This process's live descendants."""
    return {child.pid for child in psutil.Process().children(recursive=True)
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE}


def _rig(tmp_path: Path, tag: str) -> Rig:
    return Rig(f"127.0.0.1:{free_port()}", tmp_path, tag, model=MODEL, say=print)


@pytest.mark.timeout(180)
async def test_a_scenario_ended_by_an_error_leaves_no_process_of_the_rig(tmp_path: Path) -> None:
    """The pod exits (nothing listens at its bootstrap) and the scenario ends with the rig's
    error, while the commit watch has already failed the same way: the rig still stops its
    counterparty, and the scenario's own error is the one raised."""
    before = _children()

    async def scenario() -> None:
        async with _rig(tmp_path, "error") as rig:
            rig.watch_commits()
            rig.start_pod("pod")
            assert len(_children() - before) == 2  # the counterparty and the pod
            await rig.wait_for_calls(1, timeout_s=120)

    with pytest.raises(HarnessError, match="pod pod exited with 2 unasked"):
        await scenario()
    assert not _children() - before, "the rig left processes running"


@pytest.mark.timeout(180)
async def test_a_scenario_cancelled_as_its_counterparty_starts_leaves_no_process_of_the_rig(
    tmp_path: Path,
) -> None:
    """Cancelled while the rig waits for its counterparty to answer (a timeout during the
    rig's start): the counterparty is stopped all the same."""
    before = _children()

    async def scenario() -> None:
        async with _rig(tmp_path, "cancelled"):
            await asyncio.sleep(600)

    task = asyncio.create_task(scenario())
    while not _children() - before:  # the counterparty spawned, still importing
        assert not task.done()
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _children() - before, "the rig left processes running"
