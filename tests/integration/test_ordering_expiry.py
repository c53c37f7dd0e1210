"""Records waiting for their turn under `--ordering` never outlive their wait record's
expiration (on the real stack).

A record waits, behind earlier records of its partition or key, for as long as their calls
take — with calls hanging to the deadline, several deadlines. Its wait record must still be
unexpired when it is called, else the reconciliation sweep sends it to the DLQ while this pod
calls it too. Before the fix, the wait record was written before the wait: with the defaults
(1 h expiration), a window of 1000 behind hanging calls in 8 partitions waits ~2 h at its back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from dispatch_helpers import (
    Answer,
    InputRecord,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    pod_settings,
    produce_records,
    read_topic,
    run_pod_until,
    wait_ids,
)

from dispatcher.wire import parse_wait_record

pytestmark = pytest.mark.integration

DEADLINE_S, EXPIRATION_S, HUNG = 1.0, 2.0, 3


async def test_a_record_called_after_a_long_turn_has_an_unexpired_wait_record(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """One partition, `--ordering partition`, deadline 1 s, expiration 2 s: the first three
    calls hang past the deadline, so the fourth record's turn comes after ~3 s."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    sources = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=str(i).encode(), value=str(i).encode()) for i in range(6)])
    calls = 0

    def decide(_body: bytes) -> Answer:
        nonlocal calls
        calls += 1
        return Answer(delay_s=3 * DEADLINE_S if calls <= HUNG else 0.0)

    async with RecordingCounterparty(decide) as counterparty:
        async def finished() -> bool:
            return len(counterparty.calls) >= len(sources) and await fully_committed(
                kafka_bootstrap, group, topic)

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         ordering="partition", concurrency=10,
                                         deadline=f"{DEADLINE_S:g}s",
                                         wait_expiration=f"{EXPIRATION_S:g}s"),
                            finished, timeout_s=60)
        # the counterparty's clock is monotonic; the wait records carry wall-clock times
        to_wall = time.time() - time.monotonic()
        called_at = {call.idempotency_key: datetime.fromtimestamp(call.arrived_s + to_wall, UTC)
                     for call in counterparty.calls}

    expires: dict[str, datetime] = {}  # each wait id's latest prepare
    for raw in await read_topic(kafka_bootstrap, f"{group}.wait"):
        entry = parse_wait_record(raw.key, raw.value, raw.headers)
        if not entry.is_tombstone:
            expires[str(entry.wait_id)] = entry.expires_at
    late = {wait_id: (called_at[wait_id] - expires[wait_id]).total_seconds()
            for wait_id in map(str, wait_ids(group, sources))
            if called_at[wait_id] > expires[wait_id]}
    assert late == {}, "called after their wait record expired (seconds late)"
