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
    Outage,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    input_wait_ids,
    pod_settings,
    read_dlq,
    run_pod_until,
)

from loadtest.mock.generator import produce

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
    outage = Outage(OUTAGE_S)
    succeeded: set[str] = set()

    async with RecordingCounterparty(outage) as counterparty:
        async def finished() -> bool:
            return time.monotonic() > outage.ends + DEADLINE_S and await fully_committed(
                bootstrap, group, topic)

        await run_pod_until(pod_settings(bootstrap, topic, group, counterparty.url,
                                         concurrency=WINDOW, deadline=f"{DEADLINE_S:g}s",
                                         circuit_breaker=breaker), finished, timeout_s=120)
        for call in counterparty.calls:
            if call.arrived_s >= outage.ends and call.idempotency_key:
                succeeded.add(call.idempotency_key)
        first_call = {key: min(c.arrived_s for c in counterparty.calls
                               if c.idempotency_key == key)
                      for key in counterparty.calls_per_key()}
    started = outage.ends - OUTAGE_S
    dead = {str(entry.wait_id) for entry in await read_dlq(bootstrap, f"{group}.dlq")}
    every = {str(wait_id) for wait_id in await input_wait_ids(bootstrap, group, topic)}
    return OutageRun(
        dead_lettered=len(dead),
        keys_first_called_in_outage=sum(1 for at in first_call.values()
                                        if started + 1.0 <= at < outage.ends),
        lost=len(every - dead - succeeded),
    )


async def test_an_open_circuit_takes_no_new_records_and_loses_none(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """With the breaker (default thresholds, open 1 s) only the window in flight when the outage
    began reaches the DLQ: a probe record that runs into its deadline goes back to the line
    (before: one more record in the DLQ per deadline of outage); without the breaker, the pod
    sends a new window through its deadline every 3 s (the control: this test fails when the
    breaker does nothing)."""
    guarded = await run_through_an_outage(kafka_bootstrap, unique_name, "open=1s")
    unguarded = await run_through_an_outage(kafka_bootstrap, unique_name, "off")

    probes_at_most = int(OUTAGE_S / DEADLINE_S)
    assert guarded.lost == 0 and unguarded.lost == 0
    assert guarded.dead_lettered <= WINDOW, guarded
    assert guarded.keys_first_called_in_outage <= probes_at_most, guarded
    assert unguarded.dead_lettered >= 2 * WINDOW, unguarded


async def test_a_share_of_hung_calls_does_not_open_the_circuit(
    kafka_bootstrap: str, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    """Every 20th call hangs past the deadline; the others answer in 20 ms. The hung calls clog
    the window until they time out together, so in the breaker's last second only timeouts
    finished — but most calls *started* beside them succeeded: the counterparty is up, and the
    circuit must stay closed (before: it opened at every wave of timeouts, halving the timeout
    storm benchmark's TPS). Each hung record reaches the DLQ, every other one is called."""
    topic, group, records = unique_name("orders"), unique_name("billing"), 3000
    bootstrap = kafka_bootstrap
    await create_topic(bootstrap, topic, partitions=3)
    await produce(bootstrap, topic, records, progress=False)
    calls = 0

    def decide(_body: bytes) -> Answer:
        nonlocal calls
        calls += 1
        return Answer(delay_s=2 * DEADLINE_S if calls % 20 == 0 else 0.02)

    async with RecordingCounterparty(decide) as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= records
                    and await fully_committed(bootstrap, group, topic)
                    and len(await read_dlq(bootstrap, f"{group}.dlq")) >= records // 20)

        with caplog.at_level("INFO", logger="dispatcher.pod.circuit"):
            await run_pod_until(pod_settings(bootstrap, topic, group, counterparty.url,
                                             concurrency=100, deadline=f"{DEADLINE_S:g}s",
                                             circuit_breaker="window=1s"), finished,
                                timeout_s=120)
    assert [r.getMessage() for r in caplog.records if "circuit breaker open" in r.getMessage()
            ] == []
    dlq = await read_dlq(bootstrap, f"{group}.dlq")
    assert {entry.failure.exception for entry in dlq} == {"TimeoutError"}
    dead = {str(entry.wait_id) for entry in dlq}
    every = {str(wait_id) for wait_id in await input_wait_ids(bootstrap, group, topic)}
    assert every - dead <= set(counterparty.calls_per_key())
