"""A clean rebalance calls no record twice, also when a revoked partition has a hole: a record
not yet called (prepared ahead and waiting for a call slot, or waiting for its turn under
`--ordering key`) below a record that this pod already called. Found by the fault suite's
rebalance storm (1 repeated call in 5,400, once in four CI runs).

Before the fix the revoke abandoned every record not yet called, the hole included, and
committed below the hole: the next owner fetched from there and called again the records above
it that this pod had called. Now a hole is called here (the revoke waits for it, within half
the rebalance timeout) and only the records above the highest called one are left to the next
owner. Each test builds the hole on purpose, then a second pod joins the group."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from dispatch_helpers import (
    Answer,
    InputRecord,
    RecordingCounterparty,
    create_topic,
    pod_settings,
    produce_records,
    second_pod_until_done,
    wait_ids,
    wait_until,
)

from dispatcher.kafka.clients import AckedWriter
from dispatcher.pod import runner
from dispatcher.pod.runner import run_pod
from dispatcher.wire import OutgoingRecord, SourceRecord

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HANG_S = 12.0  # the calls that hold the window (or the key's lane) while the second pod joins


def answer(body: bytes) -> Answer:
    return Answer(delay_s=HANG_S if body.startswith(b"hang") else 0.1)


class _DelayedPrepareWriter(AckedWriter):
    """A real writer whose wait records are written late for some bodies, by prefix: a broker
    slow for one partition would hold them the same way."""

    delays: ClassVar[dict[bytes, float]] = {}

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        if topic.endswith(".wait") and record.value is not None:
            for prefix, delay_s in self.delays.items():
                if record.value.startswith(prefix):
                    await asyncio.sleep(delay_s)
        return await super().write(topic, record, partition)


@dataclass(frozen=True)
class Hole:
    """A partition state built on purpose: `flags` for both pods, and when the first pod holds
    the hole (`holds`, looked at while it runs) before the second one joins."""

    flags: dict[str, str | int]
    holds: Callable[[RecordingCounterparty, str], bool]
    what: str


async def repeated_calls(kafka_bootstrap: str, topic: str, group: str, *,
                         sources: list[SourceRecord], hole: Hole, log_path: Path,
                         ) -> dict[bytes | None, int]:
    """Run a pod until it holds `hole`, let a second pod join, run both until everything is
    called and committed; the records (by value) called more than once, with their calls."""
    ids = {str(wait_id): source for wait_id, source in zip(wait_ids(group, sources), sources,
                                                           strict=True)}
    quick_id = next(i for i, source in ids.items() if source.value == b"quick")
    async with RecordingCounterparty(answer) as counterparty:
        stop = asyncio.Event()
        first = asyncio.create_task(run_pod(pod_settings(
            kafka_bootstrap, topic, group, counterparty.url, **hole.flags), stop))
        await wait_until(lambda: hole.holds(counterparty, quick_id), hole.what, 30)
        await second_pod_until_done(kafka_bootstrap, topic, group, counterparty=counterparty,
                                    expected=set(ids), log_path=log_path, **hole.flags)
        stop.set()
        await asyncio.wait_for(first, 60)
    calls = counterparty.calls_per_key()
    assert set(calls) == set(ids)
    return {ids[i].value: n for i, n in calls.items() if n > 1}


@pytest.mark.timeout(150)
async def test_a_record_prepared_ahead_below_a_called_one_is_called_once(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Window 3 (2 more prepared ahead). Partition 0: offset 0's wait record is slow (3 s),
    offset 1 is prepared, called and done at once. Partition 1's three records then hold all
    three slots for 12 s, so offset 0 waits, prepared ahead, for a slot — a hole below the
    called offset 1 — when the second pod joins."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    sources = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"a", value=b"slow", partition=0),
        InputRecord(key=b"b", value=b"quick", partition=0),
        *(InputRecord(key=b"h%d" % i, value=b"hang-%d" % i, partition=1) for i in range(3))])
    # partition 1's prepares land after offset 1's, so offset 1 is called first
    _DelayedPrepareWriter.delays = {b"slow": 3.0, b"hang": 0.5}
    monkeypatch.setattr(runner, "AckedWriter", _DelayedPrepareWriter)
    hole = Hole({"concurrency": 3},
                lambda cp, quick: quick in cp.calls_per_key() and cp.open_calls == 3,
                "offset 1 called, the window held by partition 1")
    assert await repeated_calls(kafka_bootstrap, topic, group, sources=sources, hole=hole,
                                log_path=tmp_path / "second.log") == {}


@pytest.mark.timeout(150)
async def test_a_record_waiting_for_its_turn_below_a_called_one_is_called_once(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """`--ordering key`, one partition: offset 0 (key a) hangs 12 s, offset 1 (key a) waits
    for its turn behind it, offset 2 (key b) is called and done at once — offset 1 is a hole
    below the called offset 2 when the second pod joins."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    sources = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"a", value=b"hang", partition=0),
        InputRecord(key=b"a", value=b"behind", partition=0),
        InputRecord(key=b"b", value=b"quick", partition=0)])
    hole = Hole({"concurrency": 3, "ordering": "key"},
                lambda cp, quick: quick in cp.calls_per_key() and cp.open_calls == 1,
                "offset 2 called, offset 0 hanging")
    assert await repeated_calls(kafka_bootstrap, topic, group, sources=sources, hole=hole,
                                log_path=tmp_path / "second.log") == {}
