"""Tombstones are written behind the window (issue 11, "closer to the bound at small N"), on
the simulated Kafka: a record frees its window slot once its outcome is durable, not once its
tombstone is acknowledged, and every tombstone is still written before the pod stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from cases import answer, calls_per_record, wait_topic
from oracle import check
from world import World, quiet, simulate, until

from dispatcher.pod.window import prepared_ahead
from dispatcher.wire import OutgoingRecord

WINDOW, RECORDS = 20, 60
BEHIND = WINDOW // 10  # records that may write their tombstone outside the window
AHEAD = prepared_ahead(WINDOW)  # records admitted beyond it, prepared ahead of a call slot


def _held_until(gate: asyncio.Event) -> Callable[[World, str, str, OutgoingRecord],
                                                 Awaitable[None]]:
    """A `before_write` hook holding every tombstone back until `gate` is set."""
    async def held_tombstones(_world: World, _pod: str, topic: str,
                              record: OutgoingRecord) -> None:
        if topic.endswith(".wait") and record.value is None:
            await gate.wait()

    return held_tombstones


def test_a_slow_tombstone_does_not_hold_the_records_slot() -> None:
    """Tombstone acknowledgements are held back: the window of 20 and its 4 records prepared
    ahead still let 26 records be called (2, a tenth of the window, freed their slots for 2
    more), and no more while the tombstones wait. When a slot was held until its tombstone,
    only 24 calls arrived."""
    gate = asyncio.Event()
    called_while_held: list[int] = []

    async def hold_then_release(world: World) -> None:
        with contextlib.suppress(TimeoutError):
            await until(lambda: len(world.log.calls) >= WINDOW + AHEAD + BEHIND, timeout_s=30)
        await asyncio.sleep(0.5)
        called_while_held.append(len(world.log.calls))
        gate.set()

    log = simulate(quiet({"concurrency": WINDOW}, partitions=2, records=RECORDS,
                         handle=answer(lambda _v: 0.01), before_write=_held_until(gate),
                         script=hold_then_release))
    assert called_while_held == [WINDOW + AHEAD + BEHIND]  # then the bound holds
    assert len(calls_per_record(log)) == RECORDS
    wait = wait_topic(log)
    assert len(wait.prepares) == RECORDS
    assert not wait.open_ids  # every tombstone written before the pod stopped
    assert check(log) == []


def test_under_an_adaptive_window_the_bound_follows_its_current_size() -> None:
    """`--concurrency auto` between 10 and 500 starts at 10: a tenth of 10 (one record) may
    write its tombstone behind the window, not a tenth of 500."""
    window = 10
    gate = asyncio.Event()
    called_while_held: list[int] = []

    async def hold_then_release(world: World) -> None:
        await asyncio.sleep(5.0)
        called_while_held.append(len(world.log.calls))
        gate.set()

    log = simulate(quiet({"concurrency": "auto", "min_concurrency": window,
                          "max_concurrency": 500}, records=RECORDS,
                         handle=answer(lambda _v: 0.01), before_write=_held_until(gate),
                         script=hold_then_release))
    assert called_while_held == [window + prepared_ahead(window) + window // 10]
    assert check(log) == []
