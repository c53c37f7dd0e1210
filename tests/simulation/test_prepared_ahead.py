"""Records prepared ahead of a call slot (issue 11, "closer to the bound at small N"), on the
simulated Kafka: the pod admits a few records more than N and writes their wait records while
the window's calls run. The counterparty still never holds more than N calls; a record that
waits for its slot longer than its wait record's expiration allows (an open circuit) writes its
wait record again; records prepared ahead but never called are left, uncommitted, to the next
owner."""

from __future__ import annotations

import asyncio
import random

from cases import (
    Hanging,
    Outage,
    answer,
    called_after_expiry,
    calls_per_record,
    inputs,
    own_dlq,
    peak_open_calls,
    wait_id,
    wait_topic,
)
from oracle import check
from world import Input, World, quiet, simulate, until

from dispatcher.wire import OutgoingRecord

WINDOW = 5


def test_the_counterparty_never_holds_more_calls_than_the_window() -> None:
    """Window 5, calls of 5 to 60 ms: records are prepared ahead, yet at most 5 calls at once,
    and the window is used (5 at once is reached)."""
    delays = random.Random(7)
    log = simulate(quiet({"concurrency": WINDOW}, partitions=4, records=400,
                         handle=answer(lambda _v: delays.uniform(0.005, 0.06))))
    assert peak_open_calls(log) == WINDOW
    assert len(calls_per_record(log)) == 400
    assert max(wait_topic(log).prepares.values()) == 1
    assert check(log) == []


DEADLINE_S, EXPIRATION_S, OUTAGE_S = 1.0, 2.0, 6.0


def test_a_record_waiting_through_an_open_circuit_keeps_an_unexpired_wait_record() -> None:
    """Deadline 1 s, expiration 2 s (a wait record is written again after 0.5 s of waiting),
    a 6 s outage from the first call: the circuit opens and the records prepared ahead wait
    through it. Each is called, after the outage, before its latest wait record expires;
    every record is called or in the DLQ."""
    outage = Outage(OUTAGE_S)
    log = simulate(quiet({"concurrency": WINDOW, "deadline": DEADLINE_S,
                          "wait_expiration": EXPIRATION_S,
                          "circuit_breaker": "min-calls=2,open=1s"},
                         inputs=[Input(str(i).encode(), str(i).encode()) for i in range(20)],
                         handle=outage))
    assert called_after_expiry(log) == {}, "called after their wait record expired"
    assert max(wait_topic(log).prepares.values()) > 1, "no record waited long enough"
    dead = {str(entry.wait_id) for entry in own_dlq(log)}
    succeeded = {c.wait_id for c in log.calls if c.outcome == "ok"}
    assert {wait_id(r) for r in inputs(log)} - dead - succeeded == set()
    assert any(c.started >= outage.ends for c in log.calls)
    assert check(log) == []


async def prepares_in_offset_order(_world: World, _pod: str, topic: str,
                                   record: OutgoingRecord) -> None:
    """Wait records acknowledged in offset order (the values are the offsets), as one
    producer's writes to one partition are: the first records prepared are called first."""
    if topic.endswith(".wait") and record.value is not None:
        await asyncio.sleep(0.01 * int(record.value))


def test_records_prepared_ahead_but_never_called_go_to_the_next_owner() -> None:
    """A pod (window 2, so 2 records prepared ahead) whose calls all hang is stopped with a 1 s
    drain: its 2 calls are cut off (left open, for the sweep), but the records it prepared
    ahead and never called must not be committed: the next pod calls them and closes their
    wait records."""
    hung_window = 2
    hanging = Hanging()

    async def stop_then_restart(world: World) -> None:
        await until(lambda: len(world.log.calls) >= hung_window
                    and len(wait_topic(world.log).prepares) >= 2 * hung_window)
        await world.sigterm("a")
        hanging.hanging = False
        await world.start_pod("a")

    log = simulate(quiet({"concurrency": hung_window, "drain_grace": 1.0, "deadline": 60.0},
                         inputs=[Input(str(i).encode(), str(i).encode()) for i in range(8)],
                         handle=hanging, script=stop_then_restart,
                         before_write=prepares_in_offset_order))
    every = [wait_id(r) for r in inputs(log)]
    cut_off = {c.wait_id for c in log.calls if c.pod == "a#1"}
    assert cut_off == set(every[:hung_window])
    assert {c.wait_id for c in log.calls if c.pod == "a#2"} == set(every[hung_window:])
    assert wait_topic(log).open_ids == cut_off
    assert check(log) == []
