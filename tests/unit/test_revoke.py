"""What a revoke leaves to the next owner (dispatcher/pod/revoke.py): the records above a
partition's highest called one are abandoned; the holes below it are called here first, since
the next owner would call again everything above them."""

from __future__ import annotations

import asyncio
import logging

import pytest

from dispatcher.aio import DoneSignal
from dispatcher.flow.ordering import OrderingMode, Turns
from dispatcher.pod.lifecycle import RecordState, RecordTicket, Tickets
from dispatcher.pod.revoke import leave_uncalled
from dispatcher.pod.watermark import PartitionWatermarks, TopicPartitionKey

pytestmark = pytest.mark.unit

P0: TopicPartitionKey = ("orders", 0)


def partition(called: list[int], waiting: list[int],
              ) -> tuple[PartitionWatermarks, Tickets, dict[int, RecordTicket]]:
    """Offsets `called` are committable; `waiting` are not called yet (prepared, done set)."""
    watermarks = PartitionWatermarks()
    records: dict[int, RecordTicket] = {}
    for offset in sorted(called + waiting):
        watermarks.track(P0, offset)
        if offset in called:
            watermarks.mark_prepared(P0, offset)
        else:
            records[offset] = RecordTicket(0, 0, 0.0)
            records[offset].done.set()
    return watermarks, {P0: records}, records


async def test_records_above_the_highest_called_one_are_abandoned_at_once() -> None:
    watermarks, unprepared, records = partition(called=[0, 1], waiting=[2, 3])
    await asyncio.wait_for(leave_uncalled([P0], unprepared, watermarks, None, 5.0), 1.0)
    assert records[2].abandoned and records[3].abandoned


async def test_a_hole_below_a_called_record_is_awaited_not_abandoned() -> None:
    watermarks, unprepared, records = partition(called=[1], waiting=[0, 2])
    revoke = asyncio.create_task(leave_uncalled([P0], unprepared, watermarks, None, 5.0))
    await asyncio.sleep(0.05)
    assert not revoke.done(), "the revoke must wait for the hole's call"
    assert records[2].abandoned and not records[0].abandoned
    records[0].left_the_line()  # its call starts
    await asyncio.wait_for(revoke, 1.0)
    assert not records[0].abandoned


async def test_a_hole_whose_task_already_ended_is_not_awaited() -> None:
    watermarks, unprepared, records = partition(called=[1], waiting=[0])
    records[0].state = RecordState.ENDED
    records[0].left_the_line()
    await asyncio.wait_for(leave_uncalled([P0], unprepared, watermarks, None, 5.0), 1.0)


async def test_a_prepare_in_flight_above_is_awaited_then_left_uncalled() -> None:
    watermarks, unprepared, records = partition(called=[0], waiting=[1])
    records[1].done = DoneSignal()  # its prepare is still in flight
    revoke = asyncio.create_task(leave_uncalled([P0], unprepared, watermarks, None, 5.0))
    await asyncio.sleep(0.05)
    assert not revoke.done() and records[1].abandoned
    records[1].done.set()
    await asyncio.wait_for(revoke, 1.0)


async def test_a_hole_not_called_within_the_wait_is_abandoned_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watermarks, unprepared, records = partition(called=[2], waiting=[0, 1])
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(leave_uncalled([P0], unprepared, watermarks, None, 0.1), 1.0)
    assert records[0].abandoned and records[1].abandoned
    assert "2 records below a called one still not called" in caplog.text


async def test_under_ordering_holes_keep_their_turn_and_the_rest_are_dropped() -> None:
    watermarks, unprepared, records = partition(called=[0, 2], waiting=[1, 3])
    turns = Turns(OrderingMode.KEY)
    assert turns.admit(("orders", 0, 0, 0), b"a") is None  # in flight: the lane's head
    turn_of_1 = turns.admit(("orders", 0, 1, 0), b"a")
    assert turns.admit(("orders", 0, 2, 0), b"b") is None
    turn_of_3 = turns.admit(("orders", 0, 3, 0), b"b")
    assert turn_of_1 is not None and turn_of_3 is not None
    revoke = asyncio.create_task(leave_uncalled([P0], unprepared, watermarks, turns, 5.0))
    await asyncio.sleep(0.05)
    assert turn_of_3.call.is_set() and records[3].abandoned  # woken to end, uncalled
    assert not turn_of_1.call.is_set() and not records[1].abandoned
    turns.release(("orders", 0, 0, 0))
    assert turn_of_1.call.is_set()  # its turn came: it is called here
    records[1].left_the_line()
    await asyncio.wait_for(revoke, 1.0)
