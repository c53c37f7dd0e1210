"""Admission under `--ordering key`, on the simulated Kafka: a key whose records wait their turn
must not keep another key's records out of the window.

Found on the real stack (docs/BENCHMARKS.md, "The pod beside prosody-events"): two keys, each
in its own partition of eight, 100 ms calls, N = 100: the pod made 11 records/s where each key's
lane allows 10 (prosody-events made 19). The window filled with one key's records waiting for
their turn; the other key's lane ran dry for 3 to 6 s at a time, fed only when a fetch happened
to start at its partition (one fetch in eight).
"""

from __future__ import annotations

import asyncio
from itertools import pairwise

from cases import (
    Hanging,
    Outage,
    answer,
    called_after_expiry,
    calls_per_record,
    committed_to_end,
    inputs,
    wait_id,
    wait_topic,
)
from oracle import check
from simkafka import WriteFaults
from world import Input, World, quiet, simulate, until

from dispatcher.wire import parse_dlq_record

PER_KEY = 200
CALL_S = 0.1


def test_a_key_waiting_its_turn_does_not_starve_another_keys_lane() -> None:
    """Keys a and b in partitions 0 and 1 of eight (a fetch starting at partitions 2 to 7 and 0
    reaches partition 0 first): the two lanes must run side by side, so the run takes about
    one lane's time, not the sum of waits for a fetch that reaches partition 1."""
    inputs = [Input(key, b"%d" % i, partition=partition)
              for i in range(PER_KEY) for key, partition in ((b"a", 0), (b"b", 1))]
    log = simulate(quiet({"ordering": "key", "concurrency": 20}, partitions=8,
                         inputs=inputs, records=len(inputs),
                         handle=answer(lambda _v: CALL_S)))
    assert committed_to_end(log)
    assert len(calls_per_record(log)) == 2 * PER_KEY
    lane_s = PER_KEY * CALL_S
    first = min(call.started for call in log.calls)
    for key in (b"a", b"b"):
        ends = [call.ended for call in log.calls if call.key == key and call.ended is not None]
        assert max(ends) - first <= 1.3 * lane_s, (
            f"key {key!r}'s lane took {max(ends) - first:.1f} s for {PER_KEY} calls of "
            f"{CALL_S} s: it waited for records held out of the window")
    assert check(log) == []


WRITE_S = 0.05


def test_a_lanes_next_record_is_prepared_while_the_one_before_it_is_called() -> None:
    """One key, every acknowledged write taking `WRITE_S`: between two calls of the lane comes
    only the first record's result, the one write the lane's order needs (its outcome durable
    before the next call). Not the first record's tombstone, which closes a call already over
    and settled (found on the real stack: at 50 keys the lane's cycle was the call and three
    acknowledged writes; docs/BENCHMARKS.md, "Ordered lanes: the turn after the outcome"); nor
    the next record's wait record, written while the record ahead of it is called (its 3 ms of
    the lane's 106 ms cycle; "Ordered lanes: the next record prepared ahead")."""
    records = 20
    inputs = [Input(b"k", b"%d" % i) for i in range(records)]
    log = simulate(quiet({"ordering": "key", "concurrency": 10}, inputs=inputs,
                         records=records, handle=answer(lambda _v: CALL_S),
                         write_faults=WriteFaults(latency_s=(WRITE_S, WRITE_S))))
    assert committed_to_end(log)
    calls = sorted(log.calls, key=lambda call: call.started)
    assert len(calls) == records
    gaps = [after.started - before.ended for before, after in pairwise(calls)
            if before.ended is not None]
    assert max(gaps) <= 1.5 * WRITE_S, (
        f"the lane's calls were {min(gaps):.3f} to {max(gaps):.3f} s apart with writes of "
        f"{WRITE_S} s: the next record waited for more than the result before its call")
    assert max(wait_topic(log).prepares.values()) == 1
    assert check(log) == []


DEADLINE_S, EXPIRATION_S, OUTAGE_S = 1.0, 2.0, 6.0


def test_a_record_prepared_ahead_in_its_lane_keeps_an_unexpired_wait_record() -> None:
    """One key; deadline 1 s, expiration 2 s (a wait record is written again after 0.5 s of
    waiting), a 6 s outage from the first call: the circuit opens, the lane's head waits for a
    call slot through it, and the record behind it, prepared ahead, waits for its turn as long.
    Each record is called before its latest wait record expires, and none is left open."""
    outage = Outage(OUTAGE_S)
    log = simulate(quiet({"ordering": "key", "concurrency": 5, "deadline": DEADLINE_S,
                          "wait_expiration": EXPIRATION_S,
                          "circuit_breaker": "min-calls=2,open=1s"},
                         inputs=[Input(b"k", b"%d" % i) for i in range(8)], handle=outage))
    assert called_after_expiry(log) == {}, "called after their wait record expired"
    waited = wait_topic(log)
    assert sorted(waited.prepares.values())[-2] > 1, "no record behind the head waited long"
    assert waited.open_ids == set()
    assert any(c.started >= outage.ends for c in log.calls)
    assert check(log) == []


STOP_EXPIRATION_S = 6.0


def test_a_stop_closes_the_wait_record_of_a_record_prepared_ahead_in_its_lane() -> None:
    """One key, calls that hang, a stop with a 1.5 s drain: the head's call is cut off (left
    open: the sweep sends it to the DLQ once it expires); the record prepared ahead behind it is
    not called and not committed, and its wait record is closed at the stop, so a next pod that
    comes after its expiration finds it closed, not expired as if it had been tried: the sweep
    expires the head alone, and the next pod calls the rest, each once."""
    hanging = Hanging()

    async def stop_then_restart_after_the_expiration(world: World) -> None:
        await until(lambda: len(world.log.calls) >= 1)
        await asyncio.sleep(0.2)  # the next record's wait record acknowledged meanwhile
        await world.sigterm("a")
        hanging.hanging = False
        await asyncio.sleep(2 * STOP_EXPIRATION_S)
        await world.start_pod("a")

    # The drain's grace ends before the hung call's deadline: the call is cut off. A wait record
    # is written again after (6 - 1.9) / 2 s of waiting, longer than the grace.
    log = simulate(quiet({"ordering": "key", "concurrency": 4, "drain_grace": 1.5,
                          "deadline": 1.9, "wait_expiration": STOP_EXPIRATION_S},
                         inputs=[Input(b"k", b"%d" % i) for i in range(6)],
                         handle=hanging, script=stop_then_restart_after_the_expiration))
    every = [wait_id(r) for r in inputs(log)]
    assert {c.wait_id for c in log.calls if c.pod == "a#1"} == {every[0]}
    assert sorted(c.wait_id for c in log.calls if c.pod == "a#2") == sorted(every[1:])
    expired = {str(parse_dlq_record(r.key, r.value, r.headers).wait_id)
               for r in log.cluster.records(log.topics.dlq_topic) if r.written_by == "sweep"}
    assert expired == {every[0]}, "a record prepared ahead was left open at the stop"
    assert check(log) == []

