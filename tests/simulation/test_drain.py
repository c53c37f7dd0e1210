"""Stopping (SIGTERM): what the drain calls, what it leaves to the next owner, and how it
leaves the wait registry."""

from __future__ import annotations

import asyncio

from cases import answer
from oracle import check
from world import World, quiet, simulate


def test_records_prepared_ahead_at_a_stop_are_left_uncalled_and_their_waits_closed() -> None:
    """A stop does not start the calls of records prepared ahead above each partition's
    highest called one: they stay uncommitted for the next owner, and their wait records are
    closed, so that a next owner an hour late does not find them expired into the DLQ as if
    they had been tried."""
    expiration_s = 20.0

    async def stop_then_wait_long(world: World) -> None:
        await asyncio.sleep(1.0)
        await world.sigterm("a")
        await asyncio.sleep(expiration_s * 2)  # nobody owns the partition for a while

    log = simulate(quiet({"concurrency": 1, "deadline": 2.0, "wait_expiration": expiration_s,
                          "drain_grace": 30.0},
                         records=10, handle=answer(lambda _v: 0.4),
                         script=stop_then_wait_long, sweep_every_s=1.0))
    first = log.pods[0]
    stopped_at = first.stopped_at or 0.0
    assert all(c.started < 1.0 for c in log.calls if c.pod == first.name)
    assert not log.swept
    assert check(log) == []
    assert stopped_at < 5.0
