"""Admission under `--ordering key`, on the simulated Kafka: a key whose records wait their turn
must not keep another key's records out of the window.

Found on the real stack (docs/BENCHMARKS.md, "The pod beside prosody-events"): two keys, each
in its own partition of eight, 100 ms calls, N = 100: the pod made 11 records/s where each key's
lane allows 10 (prosody-events made 19). The window filled with one key's records waiting for
their turn; the other key's lane ran dry for 3 to 6 s at a time, fed only when a fetch happened
to start at its partition (one fetch in eight).
"""

from __future__ import annotations

from itertools import pairwise

from cases import answer, calls_per_record, committed_to_end
from oracle import check
from simkafka import WriteFaults
from world import Input, quiet, simulate

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


def test_a_lanes_next_call_does_not_wait_for_the_tombstone() -> None:
    """One key, every acknowledged write taking `WRITE_S`: between two calls of the lane come
    the first record's result (settled: its outcome is durable, in order) and the next record's
    wait record, not the first record's tombstone, which closes a call already over and settled.
    Found on the real stack: at 50 keys the lane's cycle was the call and three acknowledged
    writes (docs/BENCHMARKS.md, "Ordered lanes: the turn after the outcome")."""
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
    assert max(gaps) <= 2.5 * WRITE_S, (
        f"the lane's calls were {min(gaps):.3f} to {max(gaps):.3f} s apart with writes of "
        f"{WRITE_S} s: the next record waited for more than the result and its own wait record")
    assert check(log) == []
