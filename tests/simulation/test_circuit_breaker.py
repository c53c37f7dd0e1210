"""The circuit breaker on the simulated Kafka (issue 11): while the counterparty fails every
call, the pod stops taking new records instead of running record after record through its
deadline into the DLQ; it resumes when the counterparty answers again, and no record is lost;
a share of hung calls does not open it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from cases import Outage, calls_per_record, inputs, own_dlq, wait_id
from oracle import check
from world import Call, World, quiet, simulate

from dispatcher.handlers.record import Record

WINDOW, DEADLINE_S, OUTAGE_S, RECORDS = 20, 3.0, 9.0, 300


@dataclass(frozen=True)
class OutageRun:
    dead_lettered: int
    keys_first_called_in_outage: int
    lost: int
    violations: list[str]


def run_through_an_outage(breaker: str) -> OutageRun:
    """A pod (window 20, deadline 3 s) starts while the counterparty fails everything
    (retryable, as a 503); after 9 s it answers again. Every record must end called
    successfully or in the DLQ."""
    outage = Outage(OUTAGE_S, latency_s=0.005)
    log = simulate(quiet({"concurrency": WINDOW, "deadline": DEADLINE_S,
                          "circuit_breaker": breaker}, partitions=3, records=RECORDS,
                         handle=outage))
    started = outage.ends - OUTAGE_S
    first_call: dict[str, float] = {}
    for call in log.calls:
        first_call[call.wait_id] = min(first_call.get(call.wait_id, call.started), call.started)
    dead = {str(entry.wait_id) for entry in own_dlq(log)}
    succeeded = {c.wait_id for c in log.calls if c.outcome == "ok"}
    every = {wait_id(r) for r in inputs(log)}
    return OutageRun(
        dead_lettered=len(dead),
        keys_first_called_in_outage=sum(1 for at in first_call.values()
                                        if started + 1.0 <= at < outage.ends),
        lost=len(every - dead - succeeded), violations=check(log))


def test_an_open_circuit_takes_no_new_records_and_loses_none() -> None:
    """With the breaker (default thresholds, open 1 s) only the window in flight when the
    outage began reaches the DLQ: a probe record that runs into its deadline goes back to the
    line; without the breaker, the pod sends a new window through its deadline every 3 s (the
    control: this test fails when the breaker does nothing)."""
    guarded = run_through_an_outage("open=1s")
    unguarded = run_through_an_outage("off")

    probes_at_most = int(OUTAGE_S / DEADLINE_S)
    assert guarded.lost == 0 and unguarded.lost == 0
    assert guarded.dead_lettered <= WINDOW, guarded
    assert guarded.keys_first_called_in_outage <= probes_at_most, guarded
    assert unguarded.dead_lettered >= 2 * WINDOW, unguarded
    assert guarded.violations == []
    assert unguarded.violations == []


def test_a_share_of_hung_calls_does_not_open_the_circuit(
        caplog: pytest.LogCaptureFixture) -> None:
    """Every 20th call hangs past the deadline; the others answer in 20 ms. The hung calls clog
    the window until they time out together, so in the breaker's last second only timeouts
    finished, but most calls *started* beside them succeeded: the counterparty is up, and the
    circuit must stay closed. Each hung record reaches the DLQ, every other one is called."""
    records = 3000
    attempts = 0

    async def handle(_world: World, _call: Call, _record: Record) -> bytes | None:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(2 * DEADLINE_S if attempts % 20 == 0 else 0.02)
        return b"{}"

    with caplog.at_level("INFO", logger="dispatcher.flow.breaker"):
        log = simulate(quiet({"concurrency": 100, "deadline": DEADLINE_S,
                              "circuit_breaker": "window=1s"}, partitions=3, records=records,
                             handle=handle, sweep_every_s=30.0))
    assert [r.getMessage() for r in caplog.records
            if "circuit breaker open" in r.getMessage()] == []
    dlq = own_dlq(log)
    assert {entry.failure.exception for entry in dlq} == {"TimeoutError"}
    assert len(dlq) >= records // 20
    dead = {str(entry.wait_id) for entry in dlq}
    assert {wait_id(r) for r in inputs(log)} - dead <= set(calls_per_record(log))
    assert check(log) == []
