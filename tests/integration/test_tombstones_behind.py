"""Tombstones are written behind the window (issue 11, "closer to the bound at small N"): a
record frees its window slot once its outcome is durable, not once its tombstone is
acknowledged, and every tombstone is still written before the pod stops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from dispatch_helpers import (
    RecordingCounterparty,
    create_topic,
    pod_settings,
    read_wait_topic,
    run_pod_until,
    wait_until,
)

from dispatcher.kafka.clients import AckedWriter
from dispatcher.pod.calls import prepared_ahead
from dispatcher.wire import OutgoingRecord
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration

WINDOW, RECORDS = 20, 60
BEHIND = WINDOW // 10  # records that may write their tombstone outside the window
AHEAD = prepared_ahead(WINDOW)  # records admitted beyond it, prepared ahead of a call slot


async def test_a_slow_tombstone_does_not_hold_the_records_slot(
    kafka_bootstrap: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tombstone acknowledgements are held back (a gate in front of the real Kafka write): the
    window of 20 and its 2 records prepared ahead still let 24 records be called — 2 (a tenth
    of the window, the bound of tombstones written behind it) freed their slots for 2 more.
    When a slot was held until its tombstone, only 22 calls arrived."""
    topic, group = unique_name("orders"), unique_name("billing")
    wait_topic = f"{group}.wait"
    await create_topic(kafka_bootstrap, topic, partitions=2)
    await produce(kafka_bootstrap, topic, RECORDS, progress=False)
    gate = asyncio.Event()
    real_write = AckedWriter.write

    async def gated_write(self: AckedWriter, to: str, record: OutgoingRecord,
                          partition: int | None = None) -> int:
        if to == wait_topic and record.value is None:
            await gate.wait()
        return await real_write(self, to, record, partition)

    monkeypatch.setattr(AckedWriter, "write", gated_write)
    async with RecordingCounterparty() as counterparty:
        async def finished() -> bool:
            if not gate.is_set():
                await wait_until(lambda: len(counterparty.calls) >= WINDOW + AHEAD + BEHIND,
                                 "more than the window called while tombstones wait",
                                 timeout_s=30)
                await asyncio.sleep(0.5)
                assert len(counterparty.calls) == WINDOW + AHEAD + BEHIND  # then the bound holds
                gate.set()
            return len(counterparty.calls_per_key()) == RECORDS

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         concurrency=WINDOW), finished, timeout_s=90)
    wait = await read_wait_topic(kafka_bootstrap, wait_topic)
    assert len(wait.prepares) == RECORDS
    assert not wait.open_ids  # every tombstone written before the pod stopped
