"""The circuit breaker on the real stack (issue 11): while the counterparty fails every call, the
pod stops taking new records instead of running record after record through its deadline into
the DLQ; it resumes when the counterparty answers again, and no record is lost."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from dispatch_helpers import (
    Answer,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    input_wait_ids,
    pod_settings,
    read_dlq,
    run_pod_until,
)

from loadtest.generator import produce

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW, DEADLINE_S, OUTAGE_S, RECORDS = 20, 3.0, 9.0, 300


@dataclass(frozen=True)
class OutageRun:
    dead_lettered: int
    keys_first_called_in_outage: int
    lost: int


async def run_through_an_outage(bootstrap: str, name: Callable[[str], str],
                                breaker: str) -> OutageRun:
    """A pod (window 20, deadline 3 s) starts while the counterparty answers 503 to everything;
    after 9 s it answers 200 again. Every record must end called successfully or in the DLQ."""
    topic, group = name("orders"), name("billing")
    await create_topic(bootstrap, topic, partitions=3)
    await produce(bootstrap, topic, RECORDS, progress=False)
    outage_ends = time.monotonic() + 1e9  # set when the first call arrives
    succeeded: set[str] = set()

    def decide(_body: bytes) -> Answer:
        nonlocal outage_ends
        outage_ends = min(outage_ends, time.monotonic() + OUTAGE_S)
        return Answer(status=503) if time.monotonic() < outage_ends else Answer()

    async with RecordingCounterparty(decide) as counterparty:
        async def finished() -> bool:
            return time.monotonic() > outage_ends + DEADLINE_S and await fully_committed(
                bootstrap, group, topic)

        await run_pod_until(pod_settings(bootstrap, topic, group, counterparty.url,
                                         concurrency=WINDOW, deadline=f"{DEADLINE_S:g}s",
                                         circuit_breaker=breaker), finished, timeout_s=120)
        for call in counterparty.calls:
            if call.arrived_s >= outage_ends and call.idempotency_key:
                succeeded.add(call.idempotency_key)
        first_call = {key: min(c.arrived_s for c in counterparty.calls
                               if c.idempotency_key == key)
                      for key in counterparty.calls_per_key()}
    started = outage_ends - OUTAGE_S
    dead = {str(entry.wait_id) for entry in await read_dlq(bootstrap, f"{group}.dlq")}
    every = {str(wait_id) for wait_id in await input_wait_ids(bootstrap, group, topic)}
    return OutageRun(
        dead_lettered=len(dead),
        keys_first_called_in_outage=sum(1 for at in first_call.values()
                                        if started + 1.0 <= at < outage_ends),
        lost=len(every - dead - succeeded),
    )


async def test_an_open_circuit_takes_no_new_records_and_loses_none(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """With the breaker (default thresholds, open 1 s) the window in flight when the outage
    began reaches the DLQ, plus at most one probe record per deadline; without it, the pod
    sends a new window through its deadline every 3 s (the control: this test fails when the
    breaker does nothing)."""
    guarded = await run_through_an_outage(kafka_bootstrap, unique_name, "open=1s")
    unguarded = await run_through_an_outage(kafka_bootstrap, unique_name, "off")

    probes_at_most = int(OUTAGE_S / DEADLINE_S)
    assert guarded.lost == 0 and unguarded.lost == 0
    assert guarded.dead_lettered <= WINDOW + probes_at_most, guarded
    assert guarded.keys_first_called_in_outage <= probes_at_most, guarded
    assert unguarded.dead_lettered >= 2 * WINDOW, unguarded
