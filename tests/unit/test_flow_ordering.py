"""The ordering gate: one record in flight per key (or partition), started in offset order."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Hashable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.aio import RECHECK_S
from dispatcher.errors import ConfigError
from dispatcher.flow.ordering import (
    OrderingGate,
    OrderingMode,
    Turn,
    Turns,
    parse_ordering,
)

pytestmark = pytest.mark.unit

Record = tuple[int, int, bytes | None]  # (record id = global admission index, partition, key)

records_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.one_of(st.none(), st.binary(min_size=1, max_size=1))),
    max_size=80,
).map(lambda items: [(index, partition, key) for index, (partition, key) in enumerate(items)])


def lane_of(mode: OrderingMode, partition: int, key: bytes | None) -> Hashable | None:
    """Reference: the records that must not overlap share this value (None = no constraint)."""
    if mode is OrderingMode.KEY:
        return None if key is None else (partition, key)
    if mode is OrderingMode.PARTITION:
        return partition
    return None


def run(mode: OrderingMode, records: list[Record], seed: int) -> list[int]:
    """Admit every record, release in-flight ones in a random order; return the start order.

    Checks on the way that no two records of one lane are ever in flight together.
    """
    gate: OrderingGate[int] = OrderingGate(mode)
    by_id = {record_id: (partition, key) for record_id, partition, key in records}
    chooser = random.Random(seed)
    started: list[int] = []
    in_flight: set[int] = set()

    def start(record_id: int) -> None:
        lane = lane_of(mode, *by_id[record_id])
        if lane is not None:
            assert all(lane_of(mode, *by_id[other]) != lane for other in in_flight)
        in_flight.add(record_id)
        started.append(record_id)

    pending = list(records)
    while pending or in_flight:
        if pending and (not in_flight or chooser.random() < 0.5):
            record_id, partition, key = pending.pop(0)
            if gate.admit(record_id, partition, key):
                start(record_id)
        else:
            finished = chooser.choice(sorted(in_flight))
            in_flight.remove(finished)
            for record_id in gate.release(finished):
                start(record_id)
        assert gate.in_flight == len(in_flight)
    assert gate.waiting == 0
    return started


@given(records=records_strategy, seed=st.integers(), mode=st.sampled_from(OrderingMode))
def test_every_record_starts_once_and_each_lane_starts_in_offset_order(
    records: list[Record], seed: int, mode: OrderingMode
) -> None:
    started = run(mode, records, seed)
    assert sorted(started) == [record_id for record_id, _, _ in records]
    per_lane: dict[Hashable, list[int]] = defaultdict(list)
    for record_id in started:
        _, partition, key = records[record_id]
        lane = lane_of(mode, partition, key)
        if lane is not None:
            per_lane[lane].append(record_id)
    for order in per_lane.values():
        assert order == sorted(order)


@given(records=records_strategy)
def test_unordered_admits_everything_at_once(records: list[Record]) -> None:
    gate: OrderingGate[int] = OrderingGate(OrderingMode.UNORDERED)
    assert all(gate.admit(*record) for record in records)
    assert gate.waiting == 0
    assert all(gate.release(record_id) == [] for record_id, _, _ in records)


def test_key_mode_holds_a_key_but_not_other_keys() -> None:
    """A lane is (partition, key), as DESIGN.md says: the same key on another partition (or
    topic) is another lane, owned by whichever pod owns that partition."""
    gate: OrderingGate[str] = OrderingGate(OrderingMode.KEY)
    assert gate.admit("a0", 0, b"a")
    assert gate.admit("b0", 0, b"b")
    assert gate.admit("a1", 1, b"a")  # same key on another partition: its own lane
    assert not gate.admit("a2", 0, b"a")
    assert gate.admit("n0", 0, None)
    assert gate.admit("n1", 0, None)
    assert (gate.in_flight, gate.waiting) == (5, 1)
    assert gate.release("a0") == ["a2"]
    assert gate.release("b0") == []
    assert gate.release("a1") == []
    assert gate.release("a2") == []
    assert (gate.in_flight, gate.waiting) == (2, 0)


def test_partition_mode_holds_one_per_partition() -> None:
    gate: OrderingGate[int] = OrderingGate(OrderingMode.PARTITION)
    assert gate.admit(1, "p0", b"x")
    assert not gate.admit(2, "p0", b"y")
    assert gate.admit(3, "p1", b"x")
    assert gate.release(1) == [2]


def test_release_of_a_waiting_or_unknown_record_is_an_error() -> None:
    gate: OrderingGate[int] = OrderingGate(OrderingMode.KEY)
    gate.admit(1, 0, b"k")
    gate.admit(2, 0, b"k")
    with pytest.raises(ValueError, match="still waiting"):
        gate.release(2)
    with pytest.raises(ValueError, match="not admitted"):
        gate.release(3)
    with pytest.raises(ValueError, match="already admitted"):
        gate.admit(1, 0, b"k")


def test_forget_partition_drops_its_waiting_records_only() -> None:
    gate: OrderingGate[str] = OrderingGate(OrderingMode.KEY)
    gate.admit("p0-a", 0, b"a")
    gate.admit("p1-a", 1, b"a")
    gate.admit("p0-a2", 0, b"a")
    gate.admit("p1-a2", 1, b"a")
    assert gate.forget_partition(0) == ["p0-a2"]
    assert gate.waiting == 1
    assert gate.release("p0-a") == []  # the in-flight head of the revoked one runs on
    assert gate.release("p1-a") == ["p1-a2"]
    assert gate.release("p1-a2") == []


def test_forget_partition_keeps_the_records_it_is_told_to_keep() -> None:
    """A revoke keeps the holes below the highest called offset waiting for their turn."""
    gate: OrderingGate[tuple[int, int]] = OrderingGate(OrderingMode.KEY)
    for offset in range(4):
        gate.admit((0, offset), 0, b"a")
    assert gate.forget_partition(0, keep=lambda record: record[1] < 2) == [(0, 2), (0, 3)]
    assert gate.waiting == 1
    assert gate.release((0, 0)) == [(0, 1)]
    assert gate.release((0, 1)) == []


@pytest.mark.parametrize("text", ["key", " Partition ", "UNORDERED"])
def test_parse_ordering_accepts_the_modes(text: str) -> None:
    assert parse_ordering(text).value == text.strip().lower()


def test_parse_ordering_rejects_others_listing_the_modes() -> None:
    with pytest.raises(ConfigError, match="unordered, key, partition"):
        parse_ordering("by-key")


def test_a_record_ended_before_its_turn_leaves_its_lane() -> None:
    """A record cancelled while it waits for its turn (the drain's grace ending, its task's
    clean-up running before the call ahead of it ends) is released by that clean-up: it leaves
    its lane without a turn, and nothing behind it waits for it. It used to raise "still
    waiting; it cannot be released", and the pod stopped as if a record had failed."""
    turns = Turns(OrderingMode.PARTITION)
    ahead, waiting, behind = ("t", 0, 1, 0), ("t", 0, 2, 0), ("t", 0, 3, 0)
    assert turns.admit(ahead, b"k") is None
    waiting_turn, behind_turn = turns.admit(waiting, b"k"), turns.admit(behind, b"k")
    assert waiting_turn is not None and behind_turn is not None
    turns.release(waiting)  # cancelled before its turn
    assert turns.waiting == 1
    turns.release(ahead)
    assert behind_turn.call.is_set() and not waiting_turn.call.is_set()
    turns.release(behind)
    assert turns.waiting == 0
    assert turns.admit(("t", 0, 4, 0), b"k") is None  # the lane is empty again


def test_the_record_next_in_a_lane_may_prepare_and_the_rest_wait() -> None:
    """Behind the lane's record in flight, the next one may prepare at once (its wait record
    written while the one ahead is called) and call once that one is released; the one after
    it may prepare only then."""
    turns = Turns(OrderingMode.KEY)
    first, second, third = ("t", 0, 1, 0), ("t", 0, 2, 0), ("t", 0, 3, 0)
    assert turns.admit(first, b"k") is None
    second_turn, third_turn = turns.admit(second, b"k"), turns.admit(third, b"k")
    assert second_turn is not None and third_turn is not None
    assert second_turn.prepare.is_set() and not second_turn.call.is_set()
    assert not third_turn.prepare.is_set() and not third_turn.call.is_set()
    other_key = turns.admit(("t", 0, 4, 0), b"other")
    assert other_key is None  # another lane: at once

    turns.release(first)
    assert second_turn.call.is_set()
    assert third_turn.prepare.is_set() and not third_turn.call.is_set()
    turns.release(second)
    assert third_turn.call.is_set()


def test_a_record_next_in_its_lane_that_ends_waiting_lets_the_one_behind_prepare() -> None:
    """The record next in its lane gives up while it waits for its call turn (a stop leaves
    it uncalled): the record behind it is next now, and may prepare."""
    turns = Turns(OrderingMode.PARTITION)
    first, second, third = ("t", 0, 1, 0), ("t", 0, 2, 0), ("t", 0, 3, 0)
    turns.admit(first, b"a")
    second_turn, third_turn = turns.admit(second, b"b"), turns.admit(third, b"c")
    assert second_turn is not None and third_turn is not None
    turns.release(second)  # given up before its call turn
    assert third_turn.prepare.is_set() and not third_turn.call.is_set()
    turns.release(first)
    assert third_turn.call.is_set()


def test_a_revoke_wakes_both_turns_of_the_records_it_drops() -> None:
    turns = Turns(OrderingMode.KEY)
    turns.admit(("t", 0, 1, 0), b"k")
    second_turn, third_turn = turns.admit(("t", 0, 2, 0), b"k"), turns.admit(("t", 0, 3, 0), b"k")
    assert second_turn is not None and third_turn is not None
    assert turns.revoke(("t", 0), from_offset=2) == [("t", 0, 2, 0), ("t", 0, 3, 0)]
    for turn in (second_turn, third_turn):
        assert turn.prepare.is_set() and turn.call.is_set()
    assert turns.waiting == 0


def test_only_a_waiting_record_can_be_withdrawn() -> None:
    gate: OrderingGate[int] = OrderingGate(OrderingMode.KEY)
    gate.admit(1, 0, b"k")
    gate.admit(2, 0, b"k")
    gate.admit(3, 0, b"k")
    for not_waiting in (1, 4):  # the lane's call in flight; a record never admitted
        with pytest.raises(ValueError, match="not waiting"):
            gate.withdraw(not_waiting)
    assert gate.on_deck(1) == 2
    assert gate.withdraw(2) == 3  # next in the lane now
    assert gate.waiting == 1
    assert gate.release(1) == [3]


async def test_a_call_turn_waits_until_it_comes_its_time_passes_or_it_is_given_up() -> None:
    """`Turn.call_within` answers as a call slot's and a rate token's waits do: True once the
    turn comes, False when the time passes, and False once `given_up()` turns true, looked at
    every RECHECK_S though the time left is longer."""
    loop = asyncio.get_running_loop()
    turn = Turn()
    started = loop.time()
    assert await turn.call_within(0.05, lambda: False) is False
    assert loop.time() - started >= 0.05

    stopping = False

    def given_up() -> bool:
        return stopping

    waiting = asyncio.create_task(turn.call_within(60.0, given_up))
    await asyncio.sleep(0)
    stopping = True
    started = loop.time()
    assert await waiting is False
    assert loop.time() - started <= RECHECK_S + 0.1

    waiting = asyncio.create_task(turn.call_within(60.0, lambda: False))
    await asyncio.sleep(0)
    turn.call.set()
    assert await asyncio.wait_for(waiting, 1.0) is True
