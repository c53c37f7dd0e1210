"""Records waiting for their turn under `--ordering` never outlive their wait record's
expiration, on the simulated Kafka.

A record waits, behind earlier records of its partition or key, for as long as their calls
take: with calls hanging to the deadline, several deadlines. Its wait record must still be
unexpired when it is called, else the reconciliation sweep sends it to the DLQ while this pod
calls it too.
"""

from __future__ import annotations

import asyncio

from cases import called_after_expiry, calls_per_record, committed_to_end, own_dlq
from oracle import check
from world import Call, Input, World, quiet, simulate

from dispatcher.handlers.record import Record

DEADLINE_S, EXPIRATION_S, HUNG = 1.0, 2.0, 3


def test_a_record_called_after_a_long_turn_has_an_unexpired_wait_record() -> None:
    """One partition, `--ordering partition`, deadline 1 s, expiration 2 s: the first three
    calls hang past the deadline, so the fourth record's turn comes after ~3 s."""
    async def handle(world: World, call: Call, _record: Record) -> bytes | None:
        first_calls = sorted({c.wait_id: c.started for c in world.log.calls}.items(),
                             key=lambda item: item[1])[:HUNG]
        if call.wait_id in dict(first_calls):
            await asyncio.sleep(3 * DEADLINE_S)
        return b"{}"

    log = simulate(quiet({"ordering": "partition", "concurrency": 10, "deadline": DEADLINE_S,
                          "wait_expiration": EXPIRATION_S},
                         inputs=[Input(str(i).encode(), str(i).encode()) for i in range(6)],
                         handle=handle))
    assert committed_to_end(log)
    assert len(calls_per_record(log)) == 6
    assert [e.failure.exception for e in own_dlq(log)] == ["TimeoutError"] * HUNG
    turn_of_the_fourth = sorted(c.started for c in log.calls)[HUNG]
    assert turn_of_the_fourth >= HUNG * DEADLINE_S  # it waited longer than its expiration
    assert called_after_expiry(log) == {}, "called after their wait record expired"
    assert check(log) == []
