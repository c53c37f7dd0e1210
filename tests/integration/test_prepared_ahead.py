"""Records prepared ahead of a call slot, on the real stack (issue 11, "closer to the bound at
small N"): the pod admits a few records more than N and writes their wait records while the
window's calls run, so an ending call hands its slot to a record ready to be called. The
counterparty still never holds more than N calls, and a record that waits for its slot longer
than its wait record's expiration allows (an open circuit) writes its wait record again: the
reconciliation sweep must never find it expired while this pod still calls it."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from dispatch_helpers import (
    Answer,
    InputRecord,
    Outage,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    input_wait_ids,
    pod_settings,
    produce_records,
    read_dlq,
    read_topic,
    read_wait_topic,
    run_pod_until,
    wait_ids,
)

from dispatcher.wire import parse_wait_record
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration

WINDOW = 5


async def test_the_counterparty_never_holds_more_calls_than_the_window(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Window 5, calls of 5 to 60 ms: records are prepared ahead, yet at most 5 calls at once —
    and the window is used (5 at once is reached)."""
    topic, group, records = unique_name("orders"), unique_name("billing"), 400
    await create_topic(kafka_bootstrap, topic, partitions=4)
    await produce(kafka_bootstrap, topic, records, progress=False)
    delays = random.Random(7)

    async with RecordingCounterparty(
            lambda _body: Answer(delay_s=delays.uniform(0.005, 0.06))) as counterparty:
        async def finished() -> bool:
            return len(counterparty.calls) >= records and await fully_committed(
                kafka_bootstrap, group, topic)

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         concurrency=WINDOW), finished, timeout_s=60)
    assert counterparty.peak_open_calls == WINDOW
    assert len(counterparty.calls_per_key()) == records


DEADLINE_S, EXPIRATION_S, OUTAGE_S = 1.0, 2.0, 6.0


async def test_a_record_waiting_through_an_open_circuit_keeps_an_unexpired_wait_record(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Deadline 1 s, expiration 2 s (a wait record is written again after 0.5 s of waiting),
    a 6 s outage from the first call: the circuit opens and the records prepared ahead wait
    through it. Each is called, after the outage, before its latest wait record expires; every
    record is called or in the DLQ (before the wait record was written again, the records
    prepared ahead were called ~5 s after their 2 s expiration)."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    sources = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=str(i).encode(), value=str(i).encode()) for i in range(20)])
    outage = Outage(OUTAGE_S)

    async with RecordingCounterparty(outage) as counterparty:
        async def finished() -> bool:
            return time.monotonic() > outage.ends and await fully_committed(
                kafka_bootstrap, group, topic) and len(counterparty.calls_per_key()) >= len(
                sources) - 2 * WINDOW

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         concurrency=WINDOW, deadline=f"{DEADLINE_S:g}s",
                                         wait_expiration=f"{EXPIRATION_S:g}s",
                                         circuit_breaker="min-calls=2,open=1s"),
                            finished, timeout_s=90)
        to_wall = time.time() - time.monotonic()  # wait records carry wall-clock times
        called_at = {call.idempotency_key: datetime.fromtimestamp(call.arrived_s + to_wall, UTC)
                     for call in counterparty.calls}
        succeeded = {c.idempotency_key for c in counterparty.calls if c.arrived_s >= outage.ends}

    expires: dict[str, datetime] = {}  # each wait id's latest wait record
    prepares: Counter[str] = Counter()
    for raw in await read_topic(kafka_bootstrap, f"{group}.wait"):
        entry = parse_wait_record(raw.key, raw.value, raw.headers)
        if not entry.is_tombstone:
            expires[str(entry.wait_id)] = entry.expires_at
            prepares[str(entry.wait_id)] += 1
    late = {wait_id: (at - expires[wait_id]).total_seconds()
            for wait_id, at in called_at.items() if wait_id and at > expires[wait_id]}
    assert late == {}, "called after their wait record expired (seconds late)"
    assert max(prepares.values()) > 1, "no record waited long enough to write it again"
    dead = {str(entry.wait_id) for entry in await read_dlq(kafka_bootstrap, f"{group}.dlq")}
    every = {str(wait_id) for wait_id in await input_wait_ids(kafka_bootstrap, group, topic)}
    assert every == set(map(str, wait_ids(group, sources)))
    assert every - dead - succeeded == set()


async def test_records_prepared_ahead_but_never_called_go_to_the_next_owner(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A pod (window 2, so 2 records prepared ahead) whose calls all hang is stopped with a
    1 s drain: its 2 calls are cut off (left open, for the sweep), but the records it prepared
    ahead and never called must not be committed — the next pod calls them and closes their
    wait records. (Before: they were committable once prepared, so the next pod started past
    them and the sweep would have sent them to the DLQ after the expiration, never called.)"""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    sources = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=str(i).encode(), value=str(i).encode()) for i in range(8)])
    every = list(map(str, wait_ids(group, sources)))
    hung_window = 2

    async with RecordingCounterparty(lambda _body: Answer(delay_s=30)) as hanging:
        async def window_full_and_ahead_prepared() -> bool:
            wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
            return len(hanging.calls) >= hung_window and len(wait.prepares) >= 2 * hung_window

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, hanging.url,
                                         concurrency=hung_window, drain_grace="1s"),
                            window_full_and_ahead_prepared, timeout_s=60)
        cut_off = {c.idempotency_key for c in hanging.calls}
    assert cut_off == set(every[:hung_window])

    async with RecordingCounterparty() as counterparty:
        async def rest_called() -> bool:
            return await fully_committed(kafka_bootstrap, group, topic)

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url),
                            rest_called, timeout_s=60)
        called_next = set(counterparty.calls_per_key())
    assert called_next == set(every[hung_window:])
    wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
    assert {str(wait_id) for wait_id in wait.open_ids} == cut_off
